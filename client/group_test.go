package client

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/protocol"
)

// TestGroupPages: a group of more online members than a page holds is read
// in full by Group and GroupMembers, a page at a time by GroupPage, and
// counted by GroupCount.
func TestGroupPages(t *testing.T) {
	gw := startNode(t, "g0")
	peer, err := crdt.NewReplica(crdt.Config{Self: crdt.Origin{Node: "g1", Incarnation: 1}})
	if err != nil {
		t.Fatal(err)
	}
	const size = protocol.DefaultGroupPage + 200
	want := make([]string, size)
	deltas := make([]crdt.Delta, size)
	for i := range want {
		want[i] = fmt.Sprintf("u%05d", i)
		d, err := peer.PutLocal(crdt.Session{User: want[i], Device: "d", ID: "ses_" + want[i], Epoch: 1,
			State: crdt.StateActive, Groups: []string{"big"}, ExpiresAt: time.Now().Add(time.Hour).UnixNano()}, time.Now().UnixNano())
		if err != nil {
			t.Fatal(err)
		}
		deltas[i] = d
	}
	if err := gw.ApplyDeltas(deltas); err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	c := dialT(t, Config{Addrs: []string{gw.ClientAddr().String()}, User: "reader"})
	users := func(ps []protocol.Presence) []string {
		out := make([]string, len(ps))
		for i, p := range ps {
			out[i] = p.User
		}
		return out
	}

	g, err := c.Group(ctx, "big")
	if err != nil || g.Online != size || !slices.Equal(users(g.Members), want) || g.Next != "" {
		t.Fatalf("Group: online %d, %d members, next %q, %v", g.Online, len(g.Members), g.Next, err)
	}
	page, err := c.GroupPage(ctx, "big", 500, "")
	if err != nil || page.Online != size || !slices.Equal(users(page.Members), want[:500]) || page.Next != want[499] {
		t.Fatalf("GroupPage: online %d, %d members, next %q, %v", page.Online, len(page.Members), page.Next, err)
	}
	page, err = c.GroupPage(ctx, "big", 500, page.Next)
	if err != nil || !slices.Equal(users(page.Members), want[500:1000]) {
		t.Fatalf("second GroupPage: %d members, %v", len(page.Members), err)
	}
	var iterated []string
	for p, err := range c.GroupMembers(ctx, "big", 300) {
		if err != nil {
			t.Fatal(err)
		}
		iterated = append(iterated, p.User)
	}
	if !slices.Equal(iterated, want) {
		t.Fatalf("GroupMembers: %d members", len(iterated))
	}
	if n, err := c.GroupCount(ctx, "big"); err != nil || n != size {
		t.Fatalf("GroupCount = %d, %v", n, err)
	}
	if _, err := c.GroupPage(ctx, "big", protocol.MaxGroupPage+1, ""); err == nil {
		t.Fatal("GroupPage past MaxGroupPage: no error")
	}
}
