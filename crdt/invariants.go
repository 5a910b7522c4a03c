package crdt

import (
	"fmt"
	"maps"
)

// CheckInvariants recomputes every index from the records and reports the
// first disagreement. Tests call it after every step; it is O(state).
func (r *Replica) CheckInvariants() error {
	users := 0
	var all []*entry
	for u, d := range r.byUser.all() {
		if d.many != nil && d.one.e != nil {
			return fmt.Errorf("byUser of %s holds a device inline and a set", u)
		}
		if m := d.many; m != nil && (m.m != nil && m.list != nil || m.m == nil && len(m.list) > devicesListMax) {
			return fmt.Errorf("byUser of %s holds a list of %d and a map of %d", u, len(m.list), len(m.m))
		}
		devs := d.sorted()
		if len(devs) == 0 {
			return fmt.Errorf("byUser holds empty user %q", u)
		}
		users += len(devs)
		for i, e := range devs {
			if e.s.User != u || d.get(e.s.Device) != e {
				return fmt.Errorf("byUser of %s holds %s under the wrong key", u, e.s.Key())
			}
			if i > 0 && devs[i-1].s.Device >= e.s.Device {
				return fmt.Errorf("byUser devices of %s not sorted", u)
			}
		}
		all = append(all, devs...)
	}
	if users != r.numSessions {
		return fmt.Errorf("byUser holds %d records, numSessions %d", users, r.numSessions)
	}
	if c := r.recountCensus(); c != r.census {
		return fmt.Errorf("census %v, recounted %v", r.census, c)
	}
	for _, e := range all {
		k := e.s.Key()
		if e.counted != r.effectiveActive(e.s) {
			return fmt.Errorf("%s counted=%v but effectively active=%v", k, e.counted, !e.counted)
		}
		st := r.origin(e.s.Origin)
		if st == nil {
			return fmt.Errorf("%s has unknown origin %s", k, e.s.Origin)
		}
		if e.st != st {
			return fmt.Errorf("%s points at the state of origin %v, not of its own %s", k, e.st.origin, e.s.Origin)
		}
		it, ok := st.log.Get(e.s.Version)
		if !ok || it.e != e {
			return fmt.Errorf("origin log of %s misses %s@%d", e.s.Origin, k, e.s.Version)
		}
	}
	want := make(map[string]map[string]int)
	for _, e := range all {
		if !r.effectiveActive(e.s) {
			continue
		}
		for _, g := range e.s.Groups {
			if want[g] == nil {
				want[g] = make(map[string]int)
			}
			want[g][e.s.User]++
		}
	}
	if r.groupOnline != nil && !maps.EqualFunc(want, r.groupOnline, maps.Equal) {
		return fmt.Errorf("group index %v, recomputed %v", r.groupOnline, want)
	}
	logged := 0
	origins := 0
	for name, ns := range r.nodes.all() {
		if (r.down[name] == ns) != ns.down {
			return fmt.Errorf("node %s: down %v, in the down set %v", name, ns.down, r.down[name] == ns)
		}
		for i, st := range ns.origins {
			if st.origin.Node != name || st.node != ns {
				return fmt.Errorf("node %s holds the state of origin %s", name, st.origin)
			}
			if i > 0 && ns.origins[i-1].origin.Incarnation >= st.origin.Incarnation {
				return fmt.Errorf("node %s: origins out of order at %s", name, st.origin)
			}
		}
		if len(ns.origins) > 0 && !ns.heard && name != r.cfg.Self.Node {
			return fmt.Errorf("node %s has origins but no incarnation heard", name)
		}
		origins += len(ns.origins)
	}
	for name, ns := range r.down {
		if r.nodes.get(name) != ns {
			return fmt.Errorf("down node %s is not the replica's node state", name)
		}
	}
	if origins != r.numOrigins {
		return fmt.Errorf("%d origin states, numOrigins %d", origins, r.numOrigins)
	}
	for st := range r.allOrigins() {
		o, ns := st.origin, st.node
		if st.purged && !ns.down {
			return fmt.Errorf("origin %s marked purged while its node is up", o)
		}
		if st.latest && (o.Node == r.cfg.Self.Node || o.Incarnation != ns.latest) {
			return fmt.Errorf("origin %s cached as its node's latest incarnation; latest is %d", o, ns.latest)
		}
		var err error
		st.log.Ascend(func(it logItem) bool {
			logged++
			switch {
			case (it.a == nil) == (it.e == nil):
				err = fmt.Errorf("origin log of %s item @%d does not name exactly one record", o, it.version)
			case it.a != nil:
				a := it.a
				if r.accounts[a.User] != a || a.Origin != o || a.Version != it.version {
					err = fmt.Errorf("origin log of %s holds stale account %s@%d", o, a.User, it.version)
				}
			default:
				e := it.e
				if r.userEntry(e.s.Key()) != e || e.s.Origin != o || e.s.Version != it.version {
					err = fmt.Errorf("origin log of %s holds stale %s@%d", o, e.s.Key(), it.version)
				}
			}
			return err == nil
		})
		if err != nil {
			return err
		}
	}
	if logged != r.numSessions+len(r.accounts) {
		return fmt.Errorf("origin logs hold %d items, records %d", logged, r.numSessions+len(r.accounts))
	}
	if self := r.origin(r.cfg.Self); self.watermark != r.version {
		return fmt.Errorf("own watermark %d, version %d", self.watermark, r.version)
	}
	return nil
}
