package dissem

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rollcall/rollcall/crdt"
)

func TestMemberlistFormulas(t *testing.T) {
	// Values memberlist itself computes (util.go), so the simulator models
	// the real thing.
	for _, tc := range []struct{ mult, n, want int }{{4, 1, 4}, {4, 9, 4}, {4, 10, 8}, {4, 99, 8}, {4, 100, 12}, {2, 16, 4}} {
		if got := RetransmitLimit(tc.mult, tc.n); got != tc.want {
			t.Errorf("RetransmitLimit(%d, %d) = %d, want %d", tc.mult, tc.n, got, tc.want)
		}
	}
	if got := PushPullScale(30*time.Second, 32); got != 30*time.Second {
		t.Errorf("PushPullScale(32) = %v", got)
	}
	if got := PushPullScale(30*time.Second, 64); got != 60*time.Second {
		t.Errorf("PushPullScale(64) = %v, want 60s", got)
	}
	if got := SuspicionTimeout(4, 100, time.Second); got != 8*time.Second {
		t.Errorf("SuspicionTimeout(4, 100, 1s) = %v, want 8s", got)
	}
	if ChooseMode(64, 64) != ModeEager || ChooseMode(65, 64) != ModeEpidemic {
		t.Error("ChooseMode threshold is not inclusive of the threshold")
	}
}

func testDelta(user string, version uint64, groups int) crdt.Delta {
	s := &crdt.Session{User: user, Device: "phone", ID: "s-" + user, Epoch: 1, Seq: 1, Gateway: "n1",
		Origin: crdt.Origin{Node: "n1", Incarnation: 1}, Version: version}
	for i := range groups {
		s.Groups = append(s.Groups, fmt.Sprintf("group-%03d-%s", i, strings.Repeat("x", 40)))
	}
	return crdt.Delta{Since: version - 1, Session: s}
}

func TestPackDeltasFitsBudgetAndLosesNothing(t *testing.T) {
	var ds []crdt.Delta
	for i := range 200 {
		g := 0
		if i%50 == 0 {
			g = 40 // about 2 KB: larger than a packet
		}
		ds = append(ds, testDelta(fmt.Sprintf("user-%d", i), uint64(i+1), g))
	}
	batches, oversized := PackDeltas(ds, DefaultPacketBudget)
	big := map[int]bool{}
	for _, i := range oversized {
		big[i] = true
	}
	total := 0
	for i, b := range batches {
		enc, err := EncodeDeltas(b)
		if err != nil {
			t.Fatal(err)
		}
		if len(enc) > DefaultPacketBudget+2 && !big[i] {
			t.Errorf("batch %d is %d bytes, over budget, yet not marked oversized", i, len(enc))
		}
		if big[i] && len(b) != 1 {
			t.Errorf("oversized batch %d holds %d deltas; want it alone", i, len(b))
		}
		for _, d := range b {
			if d.Session.Version != uint64(total+1) {
				t.Fatalf("order broken: got version %d at position %d", d.Session.Version, total)
			}
			total++
		}
	}
	if total != len(ds) {
		t.Fatalf("packed %d deltas of %d", total, len(ds))
	}
	if len(oversized) != 4 {
		t.Errorf("oversized = %v, want the 4 large deltas", oversized)
	}
}

func TestLeases(t *testing.T) {
	l := NewLeases(time.Second)
	l.Heard("a", 0)
	l.Heard("b", int64(500*time.Millisecond))
	if got := l.Expire(int64(1200 * time.Millisecond)); len(got) != 1 || got[0] != "a" {
		t.Fatalf("Expire = %v, want [a]", got)
	}
	if got := l.Expire(int64(1300 * time.Millisecond)); len(got) != 0 {
		t.Fatalf("a expired twice: %v", got)
	}
	if !l.Heard("a", int64(1400*time.Millisecond)) {
		t.Fatal("hearing a down node must report it was down")
	}
	if !l.Fail("b", int64(1400*time.Millisecond), 0) || l.Fail("b", int64(1400*time.Millisecond), 0) {
		t.Fatal("Fail must report up->down once")
	}
	if l.Down("a") || !l.Down("b") {
		t.Fatal("Down disagrees")
	}
	// A late refresh (an older time) does not move the lease back.
	l.Heard("a", int64(1000*time.Millisecond))
	if at, ok := l.LastHeard("a"); !ok || at != int64(1400*time.Millisecond) {
		t.Fatalf("LastHeard(a) = %v, %v; want 1.4s, true", at, ok)
	}
	// A node memberlist declared dead before it was ever heard is down, and
	// has no lease to expire.
	if !l.Fail("c", int64(1400*time.Millisecond), time.Second) || !l.Down("c") {
		t.Fatal("Fail of an unheard node must mark it down")
	}
	if _, ok := l.LastHeard("c"); ok {
		t.Fatal("an unheard node has no last-heard time")
	}
	if !l.Heard("c", int64(2000*time.Millisecond)) || l.Down("c") {
		t.Fatal("hearing a failed node must report it was down and mark it up")
	}
	if got := l.Expire(int64(3500 * time.Millisecond)); !slices.Equal(sortedCopy(got), []string{"a", "c"}) {
		t.Fatalf("Expire = %v, want [a c] (b is already down)", got)
	}
	l.Forget("a")
	if _, ok := l.LastHeard("a"); ok || l.Down("a") {
		t.Fatal("Forget must drop the node")
	}
}

// A freshly started node leases every member memberlist reports, so a peer
// that fails before its first announcement still expires by lease.
func TestLeasesBeginAtJoin(t *testing.T) {
	l := NewLeases(time.Second)
	l.Begin("a", 0)
	l.Heard("b", 0)
	l.Begin("b", int64(900*time.Millisecond)) // already heard: unchanged
	if got := sortedCopy(l.Expire(int64(1100 * time.Millisecond))); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("Expire = %v, want [a b]", got)
	}
	// A join event does not revive a node that is down: only hearing it does.
	l.Begin("a", int64(1200*time.Millisecond))
	if !l.Down("a") {
		t.Fatal("Begin revived a down node")
	}
	if got := l.Expire(int64(5 * time.Second)); len(got) != 0 {
		t.Fatalf("Expire = %v, want nothing (both already down)", got)
	}
}

// memberlist's dead verdict ends a suspicion that began earlier: a node
// heard within the overrule window since is alive, and its lease goes on.
func TestLeasesVerdictOverruledByFreshProofOfLife(t *testing.T) {
	l := NewLeases(2 * time.Second)
	ms := int64(time.Millisecond)
	l.Heard("p", 1000*ms)
	if l.Fail("p", 1300*ms, 800*time.Millisecond) || l.Down("p") {
		t.Fatal("a verdict 300ms after proof of life must be overruled")
	}
	if got := l.Expire(3100 * ms); len(got) != 1 || got[0] != "p" {
		t.Fatalf("Expire = %v: the lease of an overruled verdict still runs", got)
	}
	l.Heard("q", 1000*ms)
	if !l.Fail("q", 1900*ms, 800*time.Millisecond) || !l.Down("q") {
		t.Fatal("a verdict 900ms after the last proof of life counts")
	}
	l.Heard("r", 1000*ms)
	if !l.Fail("r", 1100*ms, 0) || !l.Down("r") {
		t.Fatal("with no overrule window (a leave, epidemic mode) the verdict always counts")
	}
}

func sortedCopy(s []string) []string { return slices.Sorted(slices.Values(s)) }

// Leases is a table of leases by peer name, as a Node keeps them in its
// peer records, for the tests of the lease rules.
type Leases struct {
	ttl   time.Duration
	peers map[string]*lease
}

func NewLeases(ttl time.Duration) *Leases { return &Leases{ttl: ttl, peers: make(map[string]*lease)} }

func (l *Leases) entry(node string) *lease {
	p := l.peers[node]
	if p == nil {
		p = new(lease)
		l.peers[node] = p
	}
	return p
}

func (l *Leases) Heard(node string, now int64) bool { return l.entry(node).heardAt(now) }
func (l *Leases) Begin(node string, now int64)      { l.entry(node).begin(now) }
func (l *Leases) Fail(node string, now int64, within time.Duration) bool {
	return l.entry(node).fail(now, within)
}
func (l *Leases) Forget(node string)    { delete(l.peers, node) }
func (l *Leases) Down(node string) bool { p := l.peers[node]; return p != nil && p.down }
func (l *Leases) LastHeard(node string) (int64, bool) {
	if p := l.peers[node]; p != nil {
		return p.last, p.heard
	}
	return 0, false
}
func (l *Leases) Expire(now int64) []string {
	var out []string
	for node, p := range l.peers {
		if p.expire(now, l.ttl) {
			out = append(out, node)
		}
	}
	return out
}

// GapTracker is the gap rule for several origins, one gap each.
type GapTracker struct{ seen map[crdt.Origin]*gap }

func NewGapTracker() *GapTracker { return &GapTracker{seen: make(map[crdt.Origin]*gap)} }

func (g *GapTracker) Observe(o crdt.Origin, announced, local uint64) bool {
	e := g.seen[o]
	if e == nil {
		e = new(gap)
		g.seen[o] = e
	}
	return e.observe(o, announced, local)
}

func (g *GapTracker) Forget(o crdt.Origin) { delete(g.seen, o) }

func TestGapTrackerPullsOnlyPersistentGaps(t *testing.T) {
	g := NewGapTracker()
	o := crdt.Origin{Node: "n1", Incarnation: 1}
	if g.Observe(o, 10, 10) {
		t.Fatal("pulled with no gap")
	}
	if g.Observe(o, 12, 10) {
		t.Fatal("pulled on a first sighting: deltas may be in flight")
	}
	if g.Observe(o, 13, 12) {
		t.Fatal("pulled though the earlier gap closed")
	}
	if !g.Observe(o, 14, 12) {
		t.Fatal("did not pull on a gap that persisted across announcements")
	}
	if g.Observe(o, 14, 14) {
		t.Fatal("pulled after catching up")
	}
}
