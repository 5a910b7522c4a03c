package node

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/protocol"
)

// The initial events of a sub must never make a prompt reader a slow
// consumer (two back-to-back subscribes of 1,000 users
// each, from a client reading promptly, were cut as slow_consumer in 1 of 10
// trials). A sub's snapshot can be far larger than the outbound queue's
// bound: 1,000 users per request, and a group's every online member.

// onlineGroup makes count users online on a peer gateway, members of group.
func onlineGroup(t *testing.T, n *Node, group string, count int) []string {
	t.Helper()
	peer := newRemote(t, "n2")
	users := make([]string, count)
	deltas := make([]crdt.Delta, count)
	for i := range users {
		users[i] = fmt.Sprintf("m%04d", i)
		deltas[i] = peer.put(users[i], "phone", 1, crdt.StateActive, crdt.StatusAway, group)
	}
	if err := n.ApplyDeltas(deltas); err != nil {
		t.Fatal(err)
	}
	return users
}

// subStorm pipelines subs, all written at once as a client may, reads
// every reply and event promptly, and checks each sub got its ok and one
// event per subject, and nothing else arrived (no slow_consumer).
func subStorm(t *testing.T, n *Node, subs []map[string]any, events []int) {
	t.Helper()
	c, _ := connect(t, n, "watcher", "w")
	var lines strings.Builder
	for i, s := range subs {
		s["op"], s["id"] = protocol.OpSub, i
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		lines.Write(b)
		lines.WriteByte('\n')
	}
	c.sendRaw(strings.TrimSuffix(lines.String(), "\n"))
	for i := range subs {
		f := c.recv()
		if f.str("op") != protocol.OpOK || f.num("id") != float64(i) {
			t.Fatalf("sub %d: want its ok, got %v", i, f)
		}
		for k := range events[i] {
			// A prompt reader: check the op without decoding the rest.
			c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
			line, err := c.r.ReadLine()
			if err != nil || !bytes.HasPrefix(line, []byte(`{"op":"event",`)) {
				t.Fatalf("sub %d: event %d of %d: got %q, %v", i, k, events[i], line, err)
			}
		}
	}
	// Still connected, and nothing else was queued.
	c.send(map[string]any{"op": "get", "users": []string{"m0000"}, "id": "g"})
	if f := c.recv(); f.str("op") != protocol.OpPresence || f.str("id") != "g" {
		t.Fatalf("after the subs: got %v", f)
	}
	c.ok(map[string]any{"op": "bye"})
}

func usersRange(prefix string, from, to int) []string {
	out := make([]string, 0, to-from)
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("%s%04d", prefix, i))
	}
	return out
}

// TestBackToBackSubsPromptReader: two 1,000-user subs back to back, then
// the most one connection may hold (9 more thousand-user subs, several of
// them again, and a group of 3,000 online members: 15,000 events), read
// promptly, are never cut: with the default queue (1,024 frames) and with
// one of 64 frames, whatever the writer's timing. 10 trials of the pair
// and 5 of the most, for each queue.
func TestBackToBackSubsPromptReader(t *testing.T) {
	for _, tc := range []struct {
		name string
		mut  func(*Config)
	}{
		{"default queue", nil},
		{"64-frame queue", func(c *Config) {
			c.MaxLineBytes = 32 << 10
			c.OutboundQueue = 64
			c.OutboundQueueBytes = 64 << 10
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newTestNode(t, tc.mut)
			members := onlineGroup(t, n, "big", 3000)
			for trial := range 10 {
				// Two back to back: the fault's reproduction.
				subStorm(t, n, []map[string]any{
					{"users": members[:1000]}, {"users": members[1000:2000]},
				}, []int{1000, 1000})
				if trial%2 == 1 || (testing.Short() && trial > 0) {
					continue
				}
				// The most one connection may ask for.
				var subs []map[string]any
				var events []int
				for k := range 3 {
					subs = append(subs, map[string]any{"users": members[1000*k : 1000*(k+1)]})
					events = append(events, 1000)
				}
				for k := range 6 {
					subs = append(subs, map[string]any{"users": usersRange("off", 1000*k, 1000*(k+1))})
					events = append(events, 1000)
				}
				subs = append(subs, map[string]any{"group": "big"})
				events = append(events, 3000)
				for range 3 { // again: every subject gets its event again
					subs = append(subs, map[string]any{"users": members[:1000]})
					events = append(events, 1000)
				}
				subStorm(t, n, subs, events)
			}
			if st := n.Stats(); st.SlowConsumers != 0 {
				t.Fatalf("%d slow consumers", st.SlowConsumers)
			}
		})
	}
}

// TestSubSnapshotsStayBounded: a sub's snapshot is sent within the
// queue's bound, in pages queued as the writer drains them, and a client
// that pipelines subs without reading cannot pile them up: its reader takes
// the next request only once the last page has left the queue, so the
// queue never holds more than its bound, and the client is still dropped
// as a slow consumer (its writer times out).
func TestSubSnapshotsStayBounded(t *testing.T) {
	n := newTestNode(t, func(c *Config) {
		// The write timeout is what cuts the hog, and it applies to the
		// prompt reader checked at the end too: a write to a socket with
		// room fails only when the writer is not scheduled within it,
		// which on a loaded machine running the race detector happens for
		// a few hundred milliseconds. 3s is beyond such stalls and still
		// cuts the hog well within the test's bound.
		c.WriteTimeout = 3 * time.Second
		c.MaxLineBytes = 32 << 10
		c.OutboundQueue = 64
		c.OutboundQueueBytes = 64 << 10
	})
	members := onlineGroup(t, n, "big", 1000)
	c, _ := connect(t, n, "hog", "h")
	line, _ := json.Marshal(map[string]any{"op": "sub", "users": members})
	group, _ := json.Marshal(map[string]any{"op": "sub", "group": "big"})
	go func() {
		for i := range 500 { // 500 snapshots of 1,000 events: about 100 MB
			l := line
			if i%2 == 1 {
				l = group
			}
			c.nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
			if _, err := c.nc.Write(append(l, '\n')); err != nil {
				return
			}
		}
	}()
	n.mu.Lock()
	hog := n.local["hog"]["h"]
	n.mu.Unlock()
	most, mostBytes := 0, 0
	deadline := time.Now().Add(60 * time.Second) // a bound against hanging: the hog is cut a write timeout after its queue stops draining
	for n.Stats().SlowConsumers == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the hog was never dropped (the queue held at most %d frames)", most)
		}
		hog.q.mu.Lock()
		if !hog.q.closing {
			most, mostBytes = max(most, len(hog.q.frames)), max(mostBytes, hog.q.bytes)
		}
		hog.q.mu.Unlock()
		time.Sleep(100 * time.Microsecond)
	}
	if most > n.cfg.OutboundQueue || mostBytes > n.cfg.OutboundQueueBytes {
		t.Fatalf("the queue held %d frames, %d bytes: more than its bound (%d, %d)", most, mostBytes, n.cfg.OutboundQueue, n.cfg.OutboundQueueBytes)
	}
	t.Logf("the queue held at most %d frames, %d bytes", most, mostBytes)
	waitFor(t, "the hog's session to end", func() bool { return !presenceOf(n, "hog").Online })
	// Everyone else is fine.
	w, _ := connect(t, n, "w", "w")
	w.ok(map[string]any{"op": "sub", "users": members[:10]})
	for range 10 {
		w.expect(protocol.OpEvent)
	}
}

// TestGroupSnapshotStreamsWithChanges: a group sub whose snapshot is far
// larger than the queue is sent in pages; changes made while it streams
// reach the subscriber as events, and never out of order with the
// snapshot: a change to a member whose snapshot event is already sent
// comes after it; a change to one still to come comes before it, and the
// snapshot event, read later, holds the change (a newer version), never
// the state before it; a member who left before its snapshot event is
// sent gets "member":false there; one who joined gets its event. The ok
// says how many snapshot events follow, each is marked snapshot, all but
// the last more. Each subject's versions only grow.
func TestGroupSnapshotStreamsWithChanges(t *testing.T) {
	var n *Node
	var pages atomic.Int32
	hookErr := make(chan error, 1)
	peer := newRemote(t, "n3")
	n, _ = newHookedTestNode(t, func(c *Config) {
		c.MaxLineBytes = 32 << 10
		c.OutboundQueue = 64
		c.OutboundQueueBytes = 64 << 10
	}, func(nn *Node) {
		nn.pageHook = func() {
			if pages.Add(1) != 3 {
				return
			}
			// Pages of 16 events: m0000..m0031 are sent, the rest to come.
			before := n.Stats().Events
			if err := n.ApplyDeltas([]crdt.Delta{
				peer.put("m0001", "phone", 2, crdt.StateActive, crdt.StatusAvailable, "big"),
				peer.put("m0300", "phone", 2, crdt.StateActive, crdt.StatusAvailable, "big"),
				peer.put("m0200", "phone", 2, crdt.StateActive, crdt.StatusAway),
				peer.put("m0250a", "phone", 1, crdt.StateActive, crdt.StatusAway, "big"),
			}); err != nil {
				hookErr <- err
				return
			}
			// The change events are queued before the next page is read
			// (on the connection's reader, so no t.Fatal here).
			deadline := time.Now().Add(10 * time.Second)
			for n.Stats().Events < before+4 {
				if time.Now().After(deadline) {
					hookErr <- errors.New("the change events were not delivered within 10s")
					return
				}
				runtime.Gosched()
			}
		}
	})
	members := onlineGroup(t, n, "big", 400)
	c, _ := connect(t, n, "watcher", "w")
	c.send(map[string]any{"op": "sub", "group": "big", "id": "s"})
	ok := c.expect(protocol.OpOK)
	if ok.num("snapshot") != float64(len(members)) {
		t.Fatalf("ok: %v, want snapshot %d", ok, len(members))
	}
	type seen struct {
		snapshot, change []frame
		last             float64 // the last version of the user
	}
	by := map[string]*seen{}
	var snapshot []string
	changesBefore := 0 // change events between the ok and the last snapshot event
	for len(snapshot) < len(members) {
		f := c.expect(protocol.OpEvent)
		u := f.str("user")
		if f.str("group") != "big" {
			t.Fatalf("event without the group: %v", f)
		}
		s := by[u]
		if s == nil {
			s = &seen{}
			by[u] = s
		}
		if v := f.num("version"); v <= s.last {
			t.Fatalf("%s: version %v after %v", u, v, s.last)
		}
		s.last = f.num("version")
		if f["snapshot"] == true {
			snapshot = append(snapshot, u)
			s.snapshot = append(s.snapshot, f)
			if more := f["more"] == true; more != (len(snapshot) < len(members)) {
				t.Fatalf("snapshot event %d of %d: more %v", len(snapshot), len(members), more)
			}
		} else {
			changesBefore++
			s.change = append(s.change, f)
		}
	}
	if !slices.Equal(snapshot, members) {
		t.Fatalf("the snapshot's events are not one per member, in order")
	}
	select {
	case err := <-hookErr:
		t.Fatal(err)
	default:
	}
	if p := pages.Load(); p < 3 || changesBefore != 4 {
		t.Fatalf("%d pages, %d change events within the snapshot: want the changes made while it streamed", p, changesBefore)
	}
	member := func(f frame) bool { return f["member"] == true }
	// m0001's snapshot event was sent: its change follows it.
	if s := by["m0001"]; len(s.change) != 1 || s.change[0].str("status") != "available" || s.snapshot[0].num("version") > s.change[0].num("version") {
		t.Fatalf("m0001: snapshot %v, change %v", s.snapshot, s.change)
	}
	// m0300's was still to come: its change came first, and the snapshot
	// event holds the change.
	if s := by["m0300"]; len(s.change) != 1 || s.change[0].num("version") > s.snapshot[0].num("version") ||
		s.snapshot[0].str("status") != "available" || !member(s.snapshot[0]) {
		t.Fatalf("m0300: snapshot %v, change %v", s.snapshot, s.change)
	}
	// m0200 left before its snapshot event.
	if s := by["m0200"]; len(s.change) != 1 || member(s.change[0]) || member(s.snapshot[0]) {
		t.Fatalf("m0200: snapshot %v, change %v", s.snapshot, s.change)
	}
	// m0250a joined: a change event, no snapshot event.
	if s := by["m0250a"]; s == nil || len(s.change) != 1 || !member(s.change[0]) || len(s.snapshot) != 0 {
		t.Fatalf("m0250a: %+v", s)
	}
	c.expectQuiet(50 * time.Millisecond)
	if st := n.Stats(); st.SlowConsumers != 0 {
		t.Fatalf("%d slow consumers", st.SlowConsumers)
	}
}
