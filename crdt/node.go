package crdt

import (
	"iter"
	"slices"
)

// nodeState is a replica's view of one gateway node, across its
// incarnations: the newest incarnation heard of, whether the node is marked
// down, and the state of each incarnation (origin) the replica holds.
// Keeping them together makes Apply's common case one map lookup: the
// node, its incarnation's state, whether that incarnation is retired and
// whether the node is down all come from one record.
//
// The fields Apply reads (latest, heard, down, and first's leading fields)
// come first, so that they span two cache lines rather than three: in a
// large simulated cluster the record is cold whenever a delta reaches it.
type nodeState struct {
	// latest is the newest incarnation of the node this replica has heard
	// of; valid when heard.
	latest uint64
	heard  bool
	// down is set by SetNodeDown at local time downSince, cleared by
	// SetNodeUp.
	down bool
	// self is set for the replica's own node, whose sessions a down mark
	// never ends.
	self bool
	// first is the storage of the first origin (most nodes have one: no
	// second allocation).
	first     originState
	downSince int64
	// origins are the node's incarnations this replica keeps state for,
	// ascending by incarnation; usually one, first.
	origins []*originState
	inline  [1]*originState
}

// nodeOf returns the state of a node, creating it.
func (r *Replica) nodeOf(name string) *nodeState {
	ns := r.nodes.get(name)
	if ns == nil {
		ns = &nodeState{self: name == r.cfg.Self.Node}
		ns.origins = ns.inline[:0]
		r.nodes.insert(name, ns)
	}
	return ns
}

// origin returns the state of the node's incarnation inc, or nil.
func (ns *nodeState) origin(inc uint64) *originState {
	for i := len(ns.origins) - 1; i >= 0; i-- {
		if st := ns.origins[i]; st.origin.Incarnation == inc {
			return st
		} else if st.origin.Incarnation < inc {
			return nil
		}
	}
	return nil
}

// retired reports whether incarnation inc is older than the newest this
// replica has heard of its node (see Replica.retired); false for a nil ns,
// a node the replica knows nothing of.
func (ns *nodeState) retired(inc uint64) bool {
	return ns != nil && ns.heard && inc < ns.latest
}

// addOrigin creates the state of origin o, whose node's state is ns and
// which has none yet.
func (r *Replica) addOrigin(ns *nodeState, o Origin) *originState {
	var st *originState
	if len(ns.origins) == 0 { // origins are never removed: first is unused
		st = &ns.first
	} else {
		st = &originState{}
	}
	*st = originState{origin: o, node: ns, idx: uint32(len(r.originList))}
	r.originList = append(r.originList, st)
	r.byOrigin = append(r.byOrigin, st)
	i, _ := slices.BinarySearchFunc(ns.origins, o.Incarnation, func(x *originState, inc uint64) int {
		return cmpU64(x.origin.Incarnation, inc)
	})
	ns.origins = slices.Insert(ns.origins, i, st)
	return st
}

// origin returns the state of origin o, or nil.
func (r *Replica) origin(o Origin) *originState {
	if ns := r.nodes.get(o.Node); ns != nil {
		return ns.origin(o.Incarnation)
	}
	return nil
}

// originState returns the state of origin o, creating it.
func (r *Replica) originState(o Origin) *originState {
	ns := r.nodeOf(o.Node)
	if st := ns.origin(o.Incarnation); st != nil {
		return st
	}
	return r.addOrigin(ns, o)
}

// allOrigins yields the state of every origin, in no particular order.
func (r *Replica) allOrigins() iter.Seq[*originState] { return slices.Values(r.originList) }

// nodeOrigins returns the states of a node's origins (nil for a node the
// replica has none of).
func (r *Replica) nodeOrigins(node string) []*originState {
	if ns := r.nodes.get(node); ns != nil {
		return ns.origins
	}
	return nil
}

// sortedOrigins returns the state of every origin, sorted by origin: the
// replica's own list, to be read, not kept past the next origin added.
func (r *Replica) sortedOrigins() []*originState {
	if r.sorted < len(r.byOrigin) {
		byOrigin := func(a, b *originState) int { return compareOrigins(a.origin, b.origin) }
		added := r.byOrigin[r.sorted:]
		slices.SortFunc(added, byOrigin)
		if r.sorted > 0 && byOrigin(r.byOrigin[r.sorted-1], added[0]) > 0 {
			// Merge the sorted run and the added one.
			merged := make([]*originState, 0, cap(r.byOrigin))
			old := r.byOrigin[:r.sorted]
			for len(old) > 0 && len(added) > 0 {
				if byOrigin(old[0], added[0]) < 0 {
					merged, old = append(merged, old[0]), old[1:]
				} else {
					merged, added = append(merged, added[0]), added[1:]
				}
			}
			r.byOrigin = append(append(merged, old...), added...)
		}
		r.sorted = len(r.byOrigin)
	}
	return r.byOrigin
}
