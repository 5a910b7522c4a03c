package crdt

// logItem names the current record of an origin at one version.
type logItem struct {
	version uint64
	user    string
	device  string // empty for an account record
	account bool
	dead    bool // deleted; awaiting compaction (versionlog.go)
}

// span is a run of an origin's writes, (since, upto], that a replica holds
// but cannot yet fold into its watermark because of a gap below it.
type span struct{ since, upto uint64 }

// originState is a replica's view of one origin.
type originState struct {
	origin Origin
	// watermark: every write of the origin with version <= watermark is held
	// here, or is dominated by a held record or by a later write of the
	// origin above the watermark.
	watermark uint64
	pending   []span
	// gcFloor is the highest version of this origin removed by GC or purge.
	gcFloor uint64
	// log indexes the origin's current records by version, so a diff
	// touches only the records above the asker's watermark.
	log versionLog
}

func newOriginState(o Origin) *originState {
	return &originState{origin: o}
}

// observe folds the coverage (since, upto] of a received write into the
// watermark, remembering it as pending when there is a gap below.
func (st *originState) observe(since, upto uint64, maxPending int) {
	if upto <= st.watermark {
		return
	}
	if since <= st.watermark {
		st.watermark = upto
		st.drainPending()
		return
	}
	if len(st.pending) >= maxPending && maxPending > 0 {
		st.pending = st.pending[1:]
	}
	st.pending = append(st.pending, span{since, upto})
}

// raise sets the watermark to at least w.
func (st *originState) raise(w uint64) {
	if w > st.watermark {
		st.watermark = w
		st.drainPending()
	}
}

func (st *originState) drainPending() {
	for progressed := true; progressed; {
		progressed = false
		kept := st.pending[:0]
		for _, sp := range st.pending {
			switch {
			case sp.upto <= st.watermark:
				// covered
			case sp.since <= st.watermark:
				st.watermark = sp.upto
				progressed = true
			default:
				kept = append(kept, sp)
			}
		}
		st.pending = kept
	}
	if len(st.pending) == 0 {
		st.pending = nil
	}
}

// maxVersion returns the highest version of a current record of the origin.
func (st *originState) maxVersion() uint64 {
	if it, ok := st.log.Max(); ok {
		return it.version
	}
	return 0
}
