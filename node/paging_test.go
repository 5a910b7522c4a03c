package node

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/rollcall/rollcall/auth"

	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/protocol"
)

// groupMembers returns the users of a group reply's members.
func groupMembers(t *testing.T, f frame) []string {
	t.Helper()
	ms, ok := f["members"].([]any)
	if !ok {
		t.Fatalf("group reply without members: %v", f)
	}
	out := make([]string, 0, len(ms))
	for _, m := range ms {
		out = append(out, frame(m.(map[string]any)).str("user"))
	}
	return out
}

// readGroup reads every page of a group, limit members at a time (0: the
// default), checking each page's online count and order, and returns the
// members and the number of pages.
func readGroup(t *testing.T, c *client, group string, limit, online int) ([]string, int) {
	t.Helper()
	var all []string
	cursor := ""
	for pages := 1; ; pages++ {
		req := map[string]any{"op": "group", "group": group}
		if limit > 0 {
			req["limit"] = limit
		}
		if cursor != "" {
			req["cursor"] = cursor
		}
		f := c.call(req)
		if f.str("op") != protocol.OpGroup {
			t.Fatalf("page %d: %v", pages, f)
		}
		if got := int(f.num("online")); got != online {
			t.Fatalf("page %d: online %d, want %d", pages, got, online)
		}
		page := groupMembers(t, f)
		if limit > 0 && len(page) > limit {
			t.Fatalf("page %d: %d members, limit %d", pages, len(page), limit)
		}
		all = append(all, page...)
		next, ok := f["next"].(string)
		if !ok {
			t.Fatalf("page %d without next: %v", pages, f)
		}
		if next == "" {
			return all, pages
		}
		if len(page) == 0 || next != page[len(page)-1] {
			t.Fatalf("page %d: next %q is not the page's last member", pages, next)
		}
		cursor = next
	}
}

// TestGroupPaging: a group's members are read in pages of the request's
// limit, in user-name order, each page with the group's online count and
// the next cursor (empty after the last); a limit of 0 is the count alone;
// limits out of range are refused.
func TestGroupPaging(t *testing.T) {
	n := newTestNode(t, nil)
	want := onlineGroup(t, n, "big", 2500)
	c, _ := connect(t, n, "reader", "r")

	got, pages := readGroup(t, c, "big", 1000, len(want))
	if pages != 3 || !slices.Equal(got, want) {
		t.Fatalf("pages of 1000: %d pages, %d members (sorted %v)", pages, len(got), slices.IsSorted(got))
	}
	// The default page is protocol.DefaultGroupPage.
	f := c.call(map[string]any{"op": "group", "group": "big"})
	if m := groupMembers(t, f); len(m) != protocol.DefaultGroupPage || f.str("next") != want[protocol.DefaultGroupPage-1] {
		t.Fatalf("default page: %d members, next %q", len(m), f.str("next"))
	}
	// A small group is one page, with an empty next.
	f = c.call(map[string]any{"op": "group", "group": "nobody"})
	if next, ok := f["next"].(string); !ok || next != "" || len(groupMembers(t, f)) != 0 || f.num("online") != 0 {
		t.Fatalf("empty group: %v", f)
	}
	// The count alone.
	f = c.call(map[string]any{"op": "group", "group": "big", "limit": 0})
	if f.num("online") != 2500 || len(groupMembers(t, f)) != 0 || f.str("next") != "" {
		t.Fatalf("count only: %v", f)
	}
	for _, limit := range []int{-1, protocol.MaxGroupPage + 1} {
		c.send(map[string]any{"op": "group", "group": "big", "limit": limit, "id": "bad"})
		c.expectError(protocol.CodeBadRequest)
	}
}

// TestGroupPagingWhileMembersChange: the cursor is the last user a page
// held, so paging goes on where it stopped while members come and go: no
// member is listed twice, a member who leaves ahead of the cursor is not
// listed, one who joins ahead of it is.
func TestGroupPagingWhileMembersChange(t *testing.T) {
	n := newTestNode(t, nil)
	members := onlineGroup(t, n, "g", 300) // m0000..m0299, on the peer n2
	c, _ := connect(t, n, "reader", "r")
	f := c.call(map[string]any{"op": "group", "group": "g", "limit": 100})
	first := groupMembers(t, f)
	if !slices.Equal(first, members[:100]) || f.str("next") != "m0099" {
		t.Fatalf("first page: %d members, next %q", len(first), f.str("next"))
	}
	// Behind the cursor m0000 leaves; ahead of it m0150 leaves and
	// m0150a joins.
	peer := newRemote(t, "n3")
	if err := n.ApplyDeltas([]crdt.Delta{
		peer.put("m0000", "phone", 2, crdt.StateActive, crdt.StatusAway),
		peer.put("m0150", "phone", 2, crdt.StateActive, crdt.StatusAway),
		peer.put("m0150a", "phone", 1, crdt.StateActive, crdt.StatusAway, "g"),
	}); err != nil {
		t.Fatal(err)
	}
	var rest []string
	cursor := f.str("next")
	for cursor != "" {
		f = c.call(map[string]any{"op": "group", "group": "g", "limit": 100, "cursor": cursor})
		if f.num("online") != 299 {
			t.Fatalf("online %v, want 299", f["online"])
		}
		rest = append(rest, groupMembers(t, f)...)
		cursor = f.str("next")
	}
	want := slices.DeleteFunc(slices.Clone(members[100:]), func(u string) bool { return u == "m0150" })
	want = slices.Insert(want, slices.Index(want, "m0151"), "m0150a")
	if !slices.Equal(rest, want) {
		t.Fatalf("pages after the change: %d members, want %d", len(rest), len(want))
	}
}

// TestGroupReplyLargerThanTheQueue: a group whose members would not fit
// the outbound queue in one reply is read in full by a prompt reader: the
// gateway cuts each page to fit, and says where to go on. (A reply of
// every member in one line is larger than the queue's byte bound and cut
// the reader as a slow consumer.)
func TestGroupReplyLargerThanTheQueue(t *testing.T) {
	n := newTestNode(t, func(c *Config) {
		c.MaxLineBytes = 32 << 10
		c.OutboundQueue = 64
		c.OutboundQueueBytes = 64 << 10
	})
	want := onlineGroup(t, n, "big", 3000)
	c, _ := connect(t, n, "reader", "r")
	got, pages := readGroup(t, c, "big", 0, len(want))
	if !slices.Equal(got, want) {
		t.Fatalf("%d members read, want %d", len(got), len(want))
	}
	if pages < 2 {
		t.Fatalf("%d pages: want the reply cut to the queue", pages)
	}
	if st := n.Stats(); st.SlowConsumers != 0 {
		t.Fatalf("%d slow consumers", st.SlowConsumers)
	}
	t.Logf("3,000 members in %d pages", pages)
}

// BenchmarkGroupPage: the gateway's cost of one group reply from a group of
// 10,000 online members: the first page of the default size, a page deep
// in the group (cursor), and the count alone.
func BenchmarkGroupPage(b *testing.B) {
	n := newTestNode(b, nil)
	peer, err := crdt.NewReplica(crdt.Config{Self: crdt.Origin{Node: "n2", Incarnation: 1}})
	if err != nil {
		b.Fatal(err)
	}
	const size = 10000
	deltas := make([]crdt.Delta, size)
	for i := range deltas {
		u := fmt.Sprintf("m%05d", i)
		d, err := peer.PutLocal(crdt.Session{User: u, Device: "phone", ID: "ses_" + u, Epoch: 1, State: crdt.StateActive,
			Status: crdt.StatusAway, Groups: []string{"big"}, ExpiresAt: time.Now().Add(time.Hour).UnixNano()}, time.Now().UnixNano())
		if err != nil {
			b.Fatal(err)
		}
		deltas[i] = d
	}
	if err := n.ApplyDeltas(deltas); err != nil {
		b.Fatal(err)
	}
	c := &conn{n: n}
	c.grants.Store(auth.Unrestricted())
	zero := 0
	for _, bc := range []struct {
		name string
		req  protocol.Request
	}{
		{"first page", protocol.Request{Op: protocol.OpGroup, Group: "big"}},
		{"page at m08000", protocol.Request{Op: protocol.OpGroup, Group: "big", Cursor: "m08000"}},
		{"count only", protocol.Request{Op: protocol.OpGroup, Group: "big", Limit: &zero}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				reply, rerr := n.handleGroup(c, &bc.req)
				if rerr != nil {
					b.Fatal(rerr.msg)
				}
				if _, err := protocol.Marshal(reply); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
