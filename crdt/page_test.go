package crdt

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// pagedWorld is three owners whose writes a sender replica holds: connects,
// reconnects that supersede an epoch (gaps in an origin's log), clean ends
// and account records.
type pagedWorld struct {
	t       *testing.T
	rng     *rand.Rand
	writers []*Replica
	epochs  map[Key]uint64
	sender  *Replica
}

func newPagedWorld(t *testing.T, seed uint64) *pagedWorld {
	w := &pagedWorld{t: t, rng: rand.New(rand.NewPCG(seed, 7)), epochs: map[Key]uint64{}}
	for i := range 3 {
		w.writers = append(w.writers, newTestReplica(t, fmt.Sprintf("gw%d", i), 1, Config{}))
	}
	w.sender = newTestReplica(t, "sender", 1, Config{})
	return w
}

// write makes one random owner's write and applies it at the sender.
func (w *pagedWorld) write(now int64) {
	wr := w.writers[w.rng.IntN(len(w.writers))]
	var d Delta
	var err error
	if w.rng.IntN(8) == 0 {
		d, err = wr.PutAccountLocal(fmt.Sprintf("u%d", w.rng.IntN(20)), Override(w.rng.IntN(4)), "", now)
	} else {
		k := Key{User: fmt.Sprintf("u%d", w.rng.IntN(20)), Device: fmt.Sprintf("d%d", w.rng.IntN(3))}
		// A key stays with the writer that first wrote it, so that the
		// writer's replica holds the epochs it must beat.
		for _, o := range w.writers {
			if _, ok := o.Session(k); ok {
				wr = o
			}
		}
		state := StateActive
		if w.rng.IntN(4) == 0 {
			state = StateDisconnected
		}
		if cur, ok := wr.Session(k); !ok || cur.State.Terminal() || w.rng.IntN(2) == 0 {
			w.epochs[k]++
		}
		s := Session{User: k.User, Device: k.Device, ID: fmt.Sprintf("s%d", w.epochs[k]),
			Epoch: w.epochs[k], State: state, Groups: []string{"g"}, ExpiresAt: now + 1e12}
		d, err = wr.PutLocal(s, now)
	}
	if err != nil {
		w.t.Fatal(err)
	}
	if _, _, err := w.sender.Apply(d, now); err != nil {
		w.t.Fatal(err)
	}
}

// transfer pages the sender's answer to r's digest into r, stopping after
// stopAfter pages (< 0: none), calling between after each page applied;
// it reports the pages applied and whether the transfer completed.
func transfer(t *testing.T, sender, r *Replica, maxRecords, stopAfter int, between func()) (pages int, done bool) {
	t.Helper()
	var cur PageCursor
	for {
		// The receiver asks for each page with its digest as it is then.
		page, next, last := sender.DiffPage(r.Digest(), cur, maxRecords, 0)
		if n := pageSize(page); maxRecords > 0 && n > maxRecords {
			t.Fatalf("page %d of %d records and kept runs, bound %d", pages+1, n, maxRecords)
		}
		if _, err := r.ApplySync(page, 1); err != nil {
			t.Fatalf("page %d: %v", pages, err)
		}
		pages++
		if last {
			return pages, true
		}
		if pages == stopAfter {
			return pages, false
		}
		if between != nil {
			between()
		}
		cur = next
	}
}

// pageSize counts a page's records and the kept runs of its drop ranges:
// what maxRecords bounds.
func pageSize(page Sync) int {
	n := page.Len()
	for i := range page {
		if d := page[i].Drop; d != nil {
			n += len(d.Keep)
		}
	}
	return n
}

func sameState(t *testing.T, what string, a, b *Replica) {
	t.Helper()
	if !bytes.Equal(canonicalSnapshot(a), canonicalSnapshot(b)) {
		t.Fatalf("%s: replicas differ", what)
	}
}

// A paged transfer leaves the receiver holding what the sender holds, as
// one whole Diff does, in pages within the record bound.
func TestDiffPageConvergesLikeDiff(t *testing.T) {
	for seed := range uint64(20) {
		w := newPagedWorld(t, seed)
		for range 300 {
			w.write(1)
		}
		whole := newTestReplica(t, "whole", 1, Config{})
		if _, err := whole.ApplySync(w.sender.Diff(whole.Digest()), 1); err != nil {
			t.Fatal(err)
		}
		paged := newTestReplica(t, "paged", 1, Config{})
		held := w.sender.Diff(paged.Digest()).Len()
		pages, _ := transfer(t, w.sender, paged, 7, -1, nil)
		if want := (held + 6) / 7; pages < want {
			t.Fatalf("seed %d: %d pages for %d records at 7 a page, want at least %d", seed, pages, held, want)
		}
		sameState(t, fmt.Sprintf("seed %d: paged and whole", seed), paged, whole)
		sameState(t, fmt.Sprintf("seed %d: paged and sender", seed), paged, w.sender)
		// Level now: another round sends nothing.
		if s := w.sender.Diff(paged.Digest()); s.Len() != 0 {
			t.Fatalf("seed %d: %d records still owed after the transfer", seed, s.Len())
		}
	}
}

// A transfer cut after any page resumes from the receiver's next digest
// and converges; what a page claimed is held.
func TestDiffPageResumesAfterAnInterruption(t *testing.T) {
	for seed := range uint64(20) {
		w := newPagedWorld(t, seed)
		for range 200 {
			w.write(1)
		}
		r := newTestReplica(t, "joiner", 1, Config{})
		held := w.sender.Diff(r.Digest()).Len()
		stop := 1 + int(seed)%(held/5-1)
		if _, done := transfer(t, w.sender, r, 5, stop, nil); done {
			t.Fatalf("seed %d: transfer done before page %d", seed, stop)
		}
		before := r.Stats().Sessions
		pages, done := transfer(t, w.sender, r, 5, -1, nil)
		if !done {
			t.Fatalf("seed %d: resumed transfer not done", seed)
		}
		if before == 0 {
			t.Fatalf("seed %d: the first %d pages brought nothing", seed, stop)
		}
		sameState(t, fmt.Sprintf("seed %d: resumed", seed), r, w.sender)
		if full, _ := transfer(t, w.sender, newTestReplica(t, "fresh", 1, Config{}), 5, -1, nil); pages >= full {
			t.Fatalf("seed %d: the resumed transfer took %d pages, as many as a fresh one (%d)", seed, pages, full)
		}
	}
}

// Writes the sender takes while a transfer is under way are not lost: they
// arrive in later pages or in the next anti-entropy round.
func TestDiffPageKeepsWritesMadeDuringTheTransfer(t *testing.T) {
	for seed := range uint64(20) {
		w := newPagedWorld(t, seed)
		for range 200 {
			w.write(1)
		}
		r := newTestReplica(t, "joiner", 1, Config{})
		transfer(t, w.sender, r, 6, -1, func() {
			for range 3 {
				w.write(2)
			}
		})
		if _, err := r.ApplySync(w.sender.Diff(r.Digest()), 2); err != nil {
			t.Fatal(err)
		}
		sameState(t, fmt.Sprintf("seed %d: after the next round", seed), r, w.sender)
	}
}

// A joiner holds nothing, so even from a sender that has collected
// tombstones (a GC floor above the joiner's watermark of 0) it gets its
// answer in pages, not as one full snapshot, and ends level with the
// sender.
func TestDiffPagePagesAJoinerPastTheGCFloor(t *testing.T) {
	for seed := range uint64(10) {
		w := newPagedWorld(t, seed)
		for range 300 {
			w.write(1)
		}
		for range 50 {
			w.write(2)
		}
		if st := w.sender.GC(2 + int64(DefaultTombstoneHorizon)); st.Tombstones == 0 {
			t.Fatalf("seed %d: no tombstone collected", seed)
		}
		joiner := newTestReplica(t, "joiner", 1, Config{})
		if page, _, _ := w.sender.DiffPage(joiner.Digest(), PageCursor{}, 7, 0); page.Len() > 7 {
			t.Fatalf("seed %d: a joiner's first page holds %d records, bound 7", seed, page.Len())
		}
		pages, _ := transfer(t, w.sender, joiner, 7, -1, nil)
		if pages < 2 {
			t.Fatalf("seed %d: %d page", seed, pages)
		}
		sameState(t, fmt.Sprintf("seed %d: joiner and sender", seed), joiner, w.sender)
	}
}

// laggingWorld is a paged world whose sender has collected tombstones
// below what lagging replicas, level with it before, hold: each of them
// is owed a full snapshot.
func laggingWorld(t *testing.T, seed uint64, lagging ...string) (*pagedWorld, []*Replica) {
	w := newPagedWorld(t, seed)
	for range 300 {
		w.write(1)
	}
	var rs []*Replica
	for _, name := range lagging {
		r := newTestReplica(t, name, 1, Config{})
		if _, err := r.ApplySync(w.sender.Diff(r.Digest()), 1); err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	for range 100 {
		w.write(2)
	}
	if st := w.sender.GC(2 + int64(DefaultTombstoneHorizon)); st.Tombstones == 0 {
		t.Fatalf("seed %d: no tombstone collected", seed)
	}
	if s := w.sender.Diff(rs[0].Digest()); len(s) == 0 || !s[0].Full {
		t.Fatalf("seed %d: the replica left behind is not owed a full snapshot", seed)
	}
	return w, rs
}

// A peer that holds records and lags below the sender's GC floor is owed a
// full snapshot: it gets it in pages within the bound, as it would a
// difference, and ends holding what the whole snapshot in one message
// would have left it holding.
func TestDiffPagePagesALaggingPeer(t *testing.T) {
	for seed := range uint64(20) {
		w, rs := laggingWorld(t, seed, "paged", "whole")
		paged, whole := rs[0], rs[1]
		if _, err := whole.ApplySync(w.sender.Diff(whole.Digest()), 3); err != nil {
			t.Fatal(err)
		}
		pages, done := transfer(t, w.sender, paged, 7, -1, nil)
		if !done || pages < 2 {
			t.Fatalf("seed %d: %d pages, done %v", seed, pages, done)
		}
		sameState(t, fmt.Sprintf("seed %d: paged and whole", seed), paged, whole)
		if s := w.sender.Diff(paged.Digest()); s.Len() != 0 || len(s) > 0 && s[0].Full {
			t.Fatalf("seed %d: still owed %d records (full %v) after the snapshot", seed, s.Len(), len(s) > 0 && s[0].Full)
		}
	}
}

// A paged snapshot cut after any page, in either pass, resumes from the
// receiver's next digest and ends as the whole snapshot would.
func TestDiffPageResumesALaggingPeer(t *testing.T) {
	for seed := range uint64(20) {
		w, rs := laggingWorld(t, seed, "cut", "whole")
		cut, whole := rs[0], rs[1]
		if _, err := whole.ApplySync(w.sender.Diff(whole.Digest()), 3); err != nil {
			t.Fatal(err)
		}
		probe := newTestReplica(t, "probe", 1, Config{})
		if _, err := probe.ApplySync(w.sender.Diff(probe.Digest()), 3); err != nil {
			t.Fatal(err)
		}
		stop := 1 + int(seed)*3
		if _, done := transfer(t, w.sender, cut, 5, stop, nil); done {
			continue // the snapshot fit before the cut
		}
		if _, done := transfer(t, w.sender, cut, 5, -1, nil); !done {
			t.Fatalf("seed %d: resumed snapshot not done", seed)
		}
		// Anti-entropy goes on until nothing is owed.
		for range 3 {
			if _, err := cut.ApplySync(w.sender.Diff(cut.Digest()), 3); err != nil {
				t.Fatal(err)
			}
		}
		sameState(t, fmt.Sprintf("seed %d: resumed and whole", seed), cut, whole)
	}
}

// A sender that is not the origin of what it sends may lack some of an
// origin's writes (lost deltas) and hold later ones, and fill the gap
// between two pages of a transfer. Whatever watermark a page leaves the
// receiver with, the receiver holds what it covers; and the origins' answers
// to its digests then bring it level.
func TestDiffPageFromASenderThatFillsItsGaps(t *testing.T) {
	for seed := range uint64(40) {
		w := newPagedWorld(t, seed)
		// Each write reaches the sender at once or waits in a backlog,
		// which reaches it a little at a time between pages.
		var backlog []Delta
		for range 300 {
			w.write(1)
		}
		w.sender = newTestReplica(t, "sender", 1, Config{})
		for _, wr := range w.writers {
			// The writer's current records, chained as Coalesce chains a
			// batch: each covers the versions since the one before.
			var ds []Delta
			ss, as := wr.Snapshot()
			for i := range ss {
				if ss[i].Origin == wr.Self() {
					ds = append(ds, Delta{Session: &ss[i]})
				}
			}
			for i := range as {
				if as[i].Origin == wr.Self() {
					ds = append(ds, Delta{Account: &as[i]})
				}
			}
			slices.SortFunc(ds, func(a, b Delta) int { return cmpU64(a.Version(), b.Version()) })
			for i := range ds {
				if i > 0 {
					ds[i].Since = ds[i-1].Version()
				}
				if w.rng.IntN(3) == 0 {
					backlog = append(backlog, ds[i])
				} else if _, _, err := w.sender.Apply(ds[i], 1); err != nil {
					t.Fatal(err)
				}
			}
		}
		r := newTestReplica(t, "receiver", 1, Config{})
		transfer(t, w.sender, r, 4, -1, func() {
			for range 4 {
				if len(backlog) == 0 {
					return
				}
				i := w.rng.IntN(len(backlog))
				if _, _, err := w.sender.Apply(backlog[i], 1); err != nil {
					t.Fatal(err)
				}
				backlog = append(backlog[:i], backlog[i+1:]...)
			}
		})
		for _, wr := range w.writers {
			if l := lacking(r, wr); len(l) > 0 {
				t.Fatalf("seed %d: the receiver's watermark for %s (%d) covers records it lacks: %v",
					seed, wr.Self(), r.Watermark(wr.Self()), l)
			}
		}
		for _, wr := range w.writers {
			// The answer carries what the receiver lacks, not records it
			// took from the sender beyond what the sender vouched for.
			s := wr.Diff(r.Digest())
			if held := heldOf(r, s); len(held) > 0 {
				t.Fatalf("seed %d: %s's answer sends records the receiver holds: %v", seed, wr.Self(), held)
			}
			if _, err := r.ApplySync(s, 1); err != nil {
				t.Fatal(err)
			}
			if l := lacking(r, wr); len(l) > 0 || r.Watermark(wr.Self()) != wr.Watermark(wr.Self()) {
				t.Fatalf("seed %d: after %s's answer the receiver is at %d of %d, lacking %v",
					seed, wr.Self(), r.Watermark(wr.Self()), wr.Watermark(wr.Self()), l)
			}
		}
	}
}

// heldOf lists the records of s that r holds already.
func heldOf(r *Replica, s Sync) []string {
	var out []string
	for i := range s {
		for j := range s[i].Sessions {
			x := &s[i].Sessions[j]
			if id := r.find(x.Key()); id != 0 {
				if held := r.session(r.recs.at(id), "", ""); held.Origin == x.Origin && held.Version == x.Version {
					out = append(out, fmt.Sprintf("%s@%d", x.Key(), x.Version))
				}
			}
		}
		for j := range s[i].Accounts {
			x := &s[i].Accounts[j]
			if held, ok := r.Account(x.User); ok && held.Origin == x.Origin && held.Version == x.Version {
				out = append(out, fmt.Sprintf("account:%s@%d", x.User, x.Version))
			}
		}
	}
	return out
}
