package node

import (
	"strconv"
	"testing"
	"time"

	"github.com/rollcall/rollcall/crdt"
)

// BenchmarkRemoteChurnFlush is what the status page's feed adds to the
// notifier: a batch of 1,000 remote users coming online or going offline,
// applied and flushed with nobody subscribed, with the feed on and off.
func BenchmarkRemoteChurnFlush(b *testing.B) {
	for _, bc := range []struct {
		name   string
		recent int
	}{{"feed", DefaultUIRecentEvents}, {"off", -1}} {
		b.Run(bc.name, func(b *testing.B) {
			const users = 1000
			n := newBenchNode(b, func(c *Config) {
				c.EventCoalesce = time.Hour // the benchmark flushes itself
				c.UIRecentEvents = bc.recent
			})
			r, err := crdt.NewReplica(crdt.Config{Self: crdt.Origin{Node: "n2", Incarnation: 1}})
			if err != nil {
				b.Fatal(err)
			}
			names := make([]string, users)
			for i := range names {
				names[i] = "user" + strconv.Itoa(i)
			}
			deltas := make([]crdt.Delta, users)
			b.ReportAllocs()
			for i := range b.N {
				b.StopTimer()
				state := crdt.StateActive
				if i%2 == 1 {
					state = crdt.StateDisconnected
				}
				now := time.Now().UnixNano()
				for j, u := range names {
					d, err := r.PutLocal(crdt.Session{User: u, Device: "phone", ID: "s" + u, Epoch: uint64(i/2 + 1), State: state,
						ExpiresAt: now + int64(time.Minute)}, now)
					if err != nil {
						b.Fatal(err)
					}
					deltas[j] = d
				}
				b.StartTimer()
				if err := n.ApplyDeltas(deltas); err != nil {
					b.Fatal(err)
				}
				n.flushEvents()
			}
		})
	}
}
