package dissem

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/rollcall/rollcall/crdt"
)

// A member cut off for longer than the tombstone horizon comes back holding
// sessions whose ends the others have since collected: it lags below their
// GC floor, and is owed a full snapshot, which drops what it should no
// longer hold. With a replica of many pages, the snapshot comes in pages
// within the page bound like any answer (both of its passes, their cursors
// through the wire), and the member ends holding what the others hold.
func TestLaggingMemberGetsTheFullSnapshotInPages(t *testing.T) {
	const pageRecords, sessions = 20, 200
	h, err := newHarness([]string{"a", "l"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	h.pageRecords = pageRecords
	a, l := h.nodes["a"], h.nodes["l"]
	for i := range sessions {
		if err := h.write(a, fmt.Sprintf("u%03d", i), "d", crdt.StatusAvailable, crdt.StateActive); err != nil {
			t.Fatal(err)
		}
	}
	h.advance(10 * time.Millisecond) // the batch delay
	h.stabilize()
	if got := len(l.r.NodeSessions("a")); got != sessions {
		t.Fatalf("l holds %d of a's %d sessions before the cut", got, sessions)
	}

	// l is cut off: half of a's sessions end, as many new ones start, and
	// nothing reaches l.
	for i := range sessions {
		state, user := crdt.StateDisconnected, fmt.Sprintf("u%03d", i)
		if i%2 == 1 {
			state, user = crdt.StateActive, fmt.Sprintf("v%03d", i)
		}
		if err := h.write(a, user, "d", crdt.StatusAvailable, state); err != nil {
			t.Fatal(err)
		}
	}
	h.advance(10 * time.Millisecond)
	for len(h.flight) > 0 {
		h.drop(0)
	}
	h.now += int64(crdt.DefaultTombstoneHorizon + time.Minute)
	if st := a.r.GC(h.now); st.Tombstones != sessions/2 {
		t.Fatalf("a collected %d tombstones, want %d", st.Tombstones, sessions/2)
	}
	if s := a.r.Diff(l.r.Digest()); len(s) == 0 || !s[0].Full || s.Len() <= pageRecords {
		t.Fatalf("l is not owed a full snapshot larger than a page (%d records)", s.Len())
	}

	// l hears from a again: anti-entropy runs until l holds what a holds.
	pages := 0
	for round := 0; !sameSessions(a, l, "a"); round++ {
		if round == 60 {
			out := h.out.String()
			t.Fatalf("l does not hold what a holds after %d rounds (%d pages) %v\n%s", round, pages, h.delivered, out[max(0, len(out)-3000):])
		}
		h.advance(time.Second)
		h.gossip()
		for len(h.flight) > 0 {
			f := h.flight[0]
			if f.msg.Type == TypeSync || f.msg.Type == TypeSyncPage {
				pages++
				if n := recordsAndRuns(f.msg.Sync); n > pageRecords {
					t.Fatalf("%s -> %s: a %s of %d records and kept runs, bound %d", f.from, f.to, f.msg.Type, n, pageRecords)
				}
			}
			h.deliver(0)
		}
	}
	if min := sessions / pageRecords; pages < min {
		t.Fatalf("%d pages, want at least %d", pages, min)
	}
	if l.core.Transfers() != 0 {
		t.Fatalf("%d transfers still incoming", l.core.Transfers())
	}
}

// recordsAndRuns counts a sync's records and the kept runs of its drop
// ranges: what a page's bound bounds.
func recordsAndRuns(s crdt.Sync) int {
	n := s.Len()
	for i := range s {
		if d := s[i].Drop; d != nil {
			n += len(d.Keep)
		}
	}
	return n
}

// sameSessions reports whether b holds exactly the sessions of node that a
// holds.
func sameSessions(a, b *hnode, node string) bool {
	ka, kb := a.r.NodeSessions(node), b.r.NodeSessions(node)
	if !reflect.DeepEqual(ka, kb) {
		return false
	}
	for _, k := range ka {
		sa, _ := a.r.Session(k)
		sb, _ := b.r.Session(k)
		if !reflect.DeepEqual(sa, sb) {
			return false
		}
	}
	return true
}
