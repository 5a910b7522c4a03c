package crdt

import (
	"fmt"
	"maps"
)

// CheckInvariants recomputes every index from the records and reports the
// first disagreement. Tests call it after every step; it is O(state).
func (r *Replica) CheckInvariants() error {
	users := 0
	for k, e := range r.sessions {
		if e.s.Key() != k {
			return fmt.Errorf("session under key %s holds %s", k, e.s.Key())
		}
		if i, ok := searchDevice(r.byUser[k.User], k.Device); !ok || r.byUser[k.User][i] != e {
			return fmt.Errorf("byUser misses %s", k)
		}
		if e.counted != r.effectiveActive(e.s) {
			return fmt.Errorf("%s counted=%v but effectively active=%v", k, e.counted, !e.counted)
		}
		st := r.origins[e.s.Origin]
		if st == nil {
			return fmt.Errorf("%s has unknown origin %s", k, e.s.Origin)
		}
		it, ok := st.log.Get(e.s.Version)
		if !ok || it.account || it.user != k.User || it.device != k.Device {
			return fmt.Errorf("origin log of %s misses %s@%d", e.s.Origin, k, e.s.Version)
		}
	}
	for u, devs := range r.byUser {
		users += len(devs)
		for i, e := range devs {
			if r.sessions[Key{u, e.s.Device}] != e {
				return fmt.Errorf("byUser holds stale %s/%s", u, e.s.Device)
			}
			if i > 0 && devs[i-1].s.Device >= e.s.Device {
				return fmt.Errorf("byUser devices of %s not sorted", u)
			}
		}
		if len(devs) == 0 {
			return fmt.Errorf("byUser holds empty user %q", u)
		}
	}
	if users != len(r.sessions) {
		return fmt.Errorf("byUser holds %d records, sessions %d", users, len(r.sessions))
	}
	want := make(map[string]map[string]int)
	for _, e := range r.sessions {
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
		if st.latest && (o.Node == r.cfg.Self.Node || o.Incarnation != r.latestInc[o.Node]) {
			return fmt.Errorf("origin %s cached as its node's latest incarnation; latest is %d", o, r.latestInc[o.Node])
		}
		var err error
		st.log.Ascend(func(it logItem) bool {
			logged++
			if it.account {
				a := r.accounts[it.user]
				if a == nil || a.Origin != o || a.Version != it.version {
					err = fmt.Errorf("origin log of %s holds stale account %s@%d", o, it.user, it.version)
				}
			} else {
				e := r.sessions[Key{it.user, it.device}]
				if e == nil || e.s.Origin != o || e.s.Version != it.version {
					err = fmt.Errorf("origin log of %s holds stale %s/%s@%d", o, it.user, it.device, it.version)
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
	if logged != len(r.sessions)+len(r.accounts) {
		return fmt.Errorf("origin logs hold %d items, records %d", logged, len(r.sessions)+len(r.accounts))
	}
	if self := r.origins[r.cfg.Self]; self.watermark != r.version {
		return fmt.Errorf("own watermark %d, version %d", self.watermark, r.version)
	}
	return nil
}
