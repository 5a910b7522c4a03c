package gossip

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkStackPropagation16 is the propagation figure of docs/results.md,
// end to end:
// 16 gateways joined by gossip on loopback, a subscriber to group "bench"
// on each of them; each iteration connects a new user (in that group) on
// one gateway and measures from the welcome to the event at the subscriber
// on every other gateway.
//
//	go test -run '^$' -bench StackPropagation16 -benchtime 300x ./gossip
func BenchmarkStackPropagation16(b *testing.B) {
	const n = 16
	s := newStack(b, n, 15*time.Second, lanProfile)
	s.waitMembers(n)
	subs := make([]*client, n)
	for i := range n {
		subs[i] = s.dial(i, fmt.Sprintf("watcher-%d", i), "d", nil)
		subs[i].heartbeat(2 * time.Second)
		subs[i].send(map[string]any{"op": "sub", "group": "bench", "id": 1})
		subs[i].expect("ok", 5*time.Second)
	}
	var all, worst []time.Duration
	b.ResetTimer()
	for it := 0; it < b.N; it++ {
		src := it % n
		user := fmt.Sprintf("user-%d", it)
		c := s.dial(src, user, "phone", map[string]any{"groups": []string{"bench"}})
		welcomed := c.welcome["_at"].(time.Time)
		var last time.Duration
		for i := range n {
			if i == src {
				continue
			}
			for {
				ev := subs[i].expect("event", 10*time.Second)
				if ev["user"] == user && ev["online"] == true {
					d := ev["_at"].(time.Time).Sub(welcomed)
					all = append(all, d)
					last = max(last, d)
					break
				}
			}
		}
		worst = append(worst, last)
		c.send(map[string]any{"op": "bye", "id": 2})
		c.expect("ok", 5*time.Second)
		// Drain the offline events so the next iteration starts clean. The
		// source's own subscriber may see neither event: its notifier may
		// coalesce a short online/offline flap into nothing.
		for i := range n {
			if i == src {
				continue
			}
			for {
				ev := subs[i].expect("event", 10*time.Second)
				if ev["user"] == user && ev["online"] == false {
					break
				}
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(percentile(all, 0.5).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(percentile(all, 0.99).Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(percentile(worst, 0.99).Microseconds())/1000, "p99-all-ms")
}
