package node

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
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

// TestSubSnapshotsStayBounded: a snapshot does not count against the
// queue's bound, but a client that pipelines subs without reading cannot
// pile them up: its reader takes the next request only once the last
// snapshot has left the queue, so the queue never holds more than one
// snapshot plus the bound, and the client is still dropped as a slow
// consumer (its writer times out).
func TestSubSnapshotsStayBounded(t *testing.T) {
	n := newTestNode(t, func(c *Config) { c.WriteTimeout = 300 * time.Millisecond })
	members := onlineGroup(t, n, "big", 1000)
	c, _ := connect(t, n, "hog", "h")
	line, _ := json.Marshal(map[string]any{"op": "sub", "users": members})
	go func() {
		for range 500 { // 500 snapshots of 1,000 events: about 100 MB
			c.nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
			if _, err := c.nc.Write(append(line, '\n')); err != nil {
				return
			}
		}
	}()
	n.mu.Lock()
	hog := n.local["hog"]["h"]
	n.mu.Unlock()
	most := 0
	deadline := time.Now().Add(30 * time.Second)
	for n.Stats().SlowConsumers == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the hog was never dropped (the queue held at most %d frames)", most)
		}
		hog.q.mu.Lock()
		most = max(most, len(hog.q.frames))
		hog.q.mu.Unlock()
		time.Sleep(100 * time.Microsecond)
	}
	if limit := 1001 + n.cfg.OutboundQueue; most > limit {
		t.Fatalf("the queue held %d frames, more than a snapshot and the bound (%d)", most, limit)
	}
	t.Logf("the queue held at most %d frames", most)
	waitFor(t, "the hog's session to end", func() bool { return !presenceOf(n, "hog").Online })
	// Everyone else is fine.
	w, _ := connect(t, n, "w", "w")
	w.ok(map[string]any{"op": "sub", "users": members})
	for range members {
		w.expect(protocol.OpEvent)
	}
}
