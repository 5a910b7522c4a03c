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
	for u, d := range r.byUser {
		if d.m != nil && d.list != nil || d.m == nil && len(d.list) > devicesListMax {
			return fmt.Errorf("byUser of %s holds a list of %d and a map of %d", u, len(d.list), len(d.m))
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
	for _, e := range all {
		k := e.s.Key()
		if e.counted != r.effectiveActive(e.s) {
			return fmt.Errorf("%s counted=%v but effectively active=%v", k, e.counted, !e.counted)
		}
		st := r.origins[e.s.Origin]
		if st == nil {
			return fmt.Errorf("%s has unknown origin %s", k, e.s.Origin)
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
	if !maps.EqualFunc(want, r.groupOnline, maps.Equal) {
		return fmt.Errorf("group index %v, recomputed %v", r.groupOnline, want)
	}
	logged := 0
	for o, st := range r.origins {
		if _, down := r.downSince[o.Node]; st.purged && !down {
			return fmt.Errorf("origin %s marked purged while its node is up", o)
		}
		if st.latest && (o.Node == r.cfg.Self.Node || o.Incarnation != r.latestInc[o.Node]) {
			return fmt.Errorf("origin %s cached as its node's latest incarnation; latest is %d", o, r.latestInc[o.Node])
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
		if st.origin != o {
			return fmt.Errorf("origin state keyed %s names %s", o, st.origin)
		}
	}
	if logged != r.numSessions+len(r.accounts) {
		return fmt.Errorf("origin logs hold %d items, records %d", logged, r.numSessions+len(r.accounts))
	}
	if self := r.origins[r.cfg.Self]; self.watermark != r.version {
		return fmt.Errorf("own watermark %d, version %d", self.watermark, r.version)
	}
	return nil
}
