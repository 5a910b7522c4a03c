package sim

import "github.com/rollcall/rollcall/crdt"

// watermarks mirrors, for one simulated node, the per-origin watermark its
// crdt.Replica keeps, so that handling an alive announcement (which needs
// the local watermark of one origin) costs O(1) instead of a full
// Replica.Digest, which is O(origins) and would make a 10,000-node run
// quadratic. It follows crdt's rules exactly (originState.observe, raise and
// drainPending, and the conditions under which Apply and ApplySync call
// them); Config.Check compares it with Replica.Digest after every event,
// and the sim tests run with Check on, so a change in crdt's rules shows up
// as a test failure rather than as a silent drift.
type watermarks struct {
	self       crdt.Origin
	maxPending int
	m          map[crdt.Origin]*wmState
}

type wmState struct {
	w       uint64
	pending []wmSpan
}

type wmSpan struct{ since, upto uint64 }

func newWatermarks(self crdt.Origin, maxPending int) *watermarks {
	return &watermarks{self: self, maxPending: maxPending, m: make(map[crdt.Origin]*wmState)}
}

func (w *watermarks) get(o crdt.Origin) uint64 {
	if st := w.m[o]; st != nil {
		return st.w
	}
	return 0
}

func (w *watermarks) state(o crdt.Origin) *wmState {
	st := w.m[o]
	if st == nil {
		st = &wmState{}
		w.m[o] = st
	}
	return st
}

// refused mirrors crdt's admission: our own records never come from outside.
func (w *watermarks) refused(o crdt.Origin) bool {
	return o.Node == w.self.Node && o.Incarnation >= w.self.Incarnation
}

// applied records that Replica.Apply(d) was called.
func (w *watermarks) applied(d *crdt.Delta) {
	o := d.Origin()
	if w.refused(o) {
		return
	}
	st := w.state(o)
	v := d.Version()
	if v <= st.w {
		return
	}
	st.observe(d.Since, v, w.maxPending)
}

// synced records that Replica.ApplySync(s) was called.
func (w *watermarks) synced(s crdt.Sync) {
	for i := range s {
		os := &s[i]
		if w.refused(os.Origin) {
			continue
		}
		w.state(os.Origin).raise(os.Watermark)
	}
}

func (st *wmState) observe(since, upto uint64, maxPending int) {
	if upto <= st.w {
		return
	}
	if since <= st.w {
		st.w = upto
		st.drain()
		return
	}
	if len(st.pending) >= maxPending && maxPending > 0 {
		st.pending = st.pending[1:]
	}
	st.pending = append(st.pending, wmSpan{since, upto})
}

func (st *wmState) raise(v uint64) {
	if v > st.w {
		st.w = v
		st.drain()
	}
}

func (st *wmState) drain() {
	for progressed := true; progressed; {
		progressed = false
		kept := st.pending[:0]
		for _, sp := range st.pending {
			switch {
			case sp.upto <= st.w:
			case sp.since <= st.w:
				st.w = sp.upto
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
