package dissem

import (
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/rollcall/rollcall/crdt"
)

// Whatever the order in which messages arrive and whichever are lost,
// once the network delivers again every replica converges, through the
// cores' own repair (alive announcements, gap pulls, answers), and every
// node shows every other one up.
func TestAnyDeliveryOrderAndLossConvergesOnceRepairRuns(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		k := rapid.IntRange(2, 4).Draw(t, "nodes")
		names := make([]string, k)
		for i := range names {
			names[i] = fmt.Sprintf("n%d", i)
		}
		h, err := newHarness(names, nil)
		if err != nil {
			t.Fatal(err)
		}
		// Answers in pages of a record or two as well as whole.
		h.pageRecords = rapid.IntRange(0, 2).Draw(t, "pageRecords")
		users := []string{"ann", "bo", "cy", "di", "ed"}
		steps := rapid.IntRange(1, 80).Draw(t, "steps")
		for range steps {
			switch rapid.IntRange(0, 5).Draw(t, "op") {
			case 0:
				n := h.nodes[rapid.SampledFrom(names).Draw(t, "owner")]
				state := crdt.StateActive
				if rapid.Bool().Draw(t, "end") {
					state = crdt.StateDisconnected
				}
				status := rapid.SampledFrom([]crdt.Status{crdt.StatusAvailable, crdt.StatusAway, crdt.StatusBusy}).Draw(t, "status")
				if err := h.write(n, rapid.SampledFrom(users).Draw(t, "user"), "d", status, state); err != nil {
					t.Fatal(err)
				}
			case 1:
				h.advance(time.Duration(rapid.Int64Range(1, 1500).Draw(t, "ms")) * time.Millisecond)
			case 2, 3:
				if len(h.flight) > 0 {
					h.deliver(rapid.IntRange(0, len(h.flight)-1).Draw(t, "deliver"))
				}
			case 4:
				if len(h.flight) > 0 {
					h.drop(rapid.IntRange(0, len(h.flight)-1).Draw(t, "drop"))
				}
			case 5:
				// memberlist's push/pull: each answers the other,
				// another's writes included.
				a := rapid.IntRange(0, k-1).Draw(t, "pushpull")
				b := (a + 1 + rapid.IntRange(0, k-2).Draw(t, "with")) % k
				h.pushPull(names[a], names[b])
			}
		}
		// Repair: the network delivers everything again.
		for range 6 {
			h.advance(time.Second)
			h.stabilize()
		}
		if err := h.converged(); err != nil {
			t.Fatalf("not converged after repair: %v", err)
		}
		for _, a := range names {
			for _, b := range names {
				if a == b {
					continue
				}
				if _, down := h.nodes[a].r.NodeDown(b); down {
					t.Fatalf("%s still shows %s down after repair", a, b)
				}
			}
		}
	})
}
