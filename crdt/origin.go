package crdt

import "slices"

// logItem names the current record of an origin at one version: 16 bytes
// without a Go pointer, so an origin's log costs the collector nothing.
type logItem struct {
	version uint64
	ref     uint32   // a recID for a session, an account slot for an account, a last-seen slot for a last seen
	kind    itemKind // what ref names
	dead    bool     // deleted; awaiting compaction (versionlog.go)
}

// itemKind says what a log item names.
type itemKind uint8

const (
	itemSession itemKind = iota + 1
	itemAccount
	itemLastSeen
)

// originState is a replica's view of one origin.
type originState struct {
	// Apply reads the fields up to log; they come first (see nodeState).
	origin Origin
	node   *nodeState // its node's state (node.go)
	idx    uint32     // its index in Replica.originList, which records hold
	// watermark: every write of the origin with version <= watermark is held
	// here, or is dominated by a held record or by a later write of the
	// origin above the watermark.
	watermark uint64
	// latest caches, for Apply, that the origin is another node's newest
	// incarnation this replica has heard of: admitted without asking
	// admit. Cleared when a newer incarnation is admitted.
	latest bool
	// purged records that GC purged the origin's sessions while its node
	// was down: coverage this replica no longer holds, forgotten when the
	// node is marked up again (SetNodeUp).
	purged bool
	// pending are runs above the watermark this replica covers, sorted by
	// After, disjoint and not touching: what a gap keeps out of the
	// watermark. Digests carry them (DigestEntry.Held).
	pending []Span
	// log indexes the origin's current records by version, so a diff
	// touches only the records above the asker's watermark.
	log versionLog
	// gcFloor is the highest version of this origin removed by GC or purge.
	gcFloor uint64
}

// observe folds the coverage (since, upto] of a received write into the
// watermark, or into the pending runs when there is a gap below.
func (st *originState) observe(since, upto uint64, maxPending int) {
	if upto <= st.watermark {
		return
	}
	if since <= st.watermark {
		st.watermark = upto
		st.drainPending()
		return
	}
	st.addPending(Span{After: since, Through: upto}, maxPending)
}

// coverVersions folds into the coverage single versions this replica
// holds (or holds a record dominating), in any order: consecutive ones as
// one run. vs is sorted in place.
func (st *originState) coverVersions(vs []uint64, maxPending int) {
	if len(vs) == 0 {
		return
	}
	slices.Sort(vs)
	run := Span{After: vs[0] - 1, Through: vs[0]}
	for _, v := range vs[1:] {
		if v <= run.Through+1 {
			run.Through = max(run.Through, v)
			continue
		}
		st.observe(run.After, run.Through, maxPending)
		run = Span{After: v - 1, Through: v}
	}
	st.observe(run.After, run.Through, maxPending)
}

// addPending inserts a run, merging it with the runs it overlaps or
// touches. Past maxPending runs the highest is forgotten: the lowest are the
// ones that can soonest join the watermark, and anti-entropy resends the rest.
func (st *originState) addPending(sp Span, maxPending int) {
	p := st.pending
	// first run that ends at or after sp begins: it may touch sp
	i, _ := slices.BinarySearchFunc(p, sp.After, func(r Span, after uint64) int { return cmpU64(r.Through, after) })
	j := i
	for j < len(p) && p[j].After <= sp.Through {
		sp.After = min(sp.After, p[j].After)
		sp.Through = max(sp.Through, p[j].Through)
		j++
	}
	st.pending = slices.Replace(p, i, j, sp)
	if maxPending > 0 && len(st.pending) > maxPending {
		st.pending = st.pending[:maxPending]
	}
}

// raise sets the watermark to at least w.
func (st *originState) raise(w uint64) {
	if w > st.watermark {
		st.watermark = w
		st.drainPending()
	}
}

// drainPending folds the runs the watermark now reaches into it.
func (st *originState) drainPending() {
	n := 0
	for n < len(st.pending) && st.pending[n].After <= st.watermark {
		st.watermark = max(st.watermark, st.pending[n].Through)
		n++
	}
	st.pending = st.pending[n:]
	if len(st.pending) == 0 {
		st.pending = nil
	}
}

// held returns a copy of the pending runs for a digest.
func (st *originState) held() []Span {
	if len(st.pending) == 0 {
		return nil
	}
	return slices.Clone(st.pending)
}

// maxVersion returns the highest version of a current record of the origin.
func (st *originState) maxVersion() uint64 {
	if it, ok := st.log.Max(); ok {
		return it.version
	}
	return 0
}
