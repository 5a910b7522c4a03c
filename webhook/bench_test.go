package webhook

import (
	"testing"

	"github.com/rollcall/rollcall/crdt"
)

// BenchmarkDecide is the work each gateway does per changed user per
// flush when webhooks are on: a status change of a user with two
// sessions, the event's id and body included.
func BenchmarkDecide(b *testing.B) {
	phone := rec("phone", "ses_0123456789abcdef", 1, 1, "gw-1", 100)
	laptop := rec("laptop", "ses_fedcba9876543210", 1, 1, "gw-2", 200)
	_, last := Decide(Last{}, observe(nil, 0, nil, phone, laptop))
	away := phone
	away.Status, away.Seq = crdt.StatusAway, 2
	laptop.Status, laptop.Seq = crdt.StatusAway, 2
	obs := []Observation{observe(nil, 0, nil, away, laptop), observe(nil, 0, nil, phone, laptop)}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		var ev *Event
		ev, last = Decide(last, obs[i%2])
		if ev == nil {
			b.Fatal("no event")
		}
	}
}

// BenchmarkNotifier is the notifier's choice among 16 gateways.
func BenchmarkNotifier(b *testing.B) {
	members := make([]string, 16)
	for i := range members {
		members[i] = "gateway-" + string(rune('a'+i))
	}
	for b.Loop() {
		_ = Notifier("user-12345", members)
	}
}
