package crdt

import (
	"fmt"
	"maps"
)

// CheckInvariants recomputes every index from the records and reports the
// first disagreement. Tests call it after every step; it is O(state).
func (r *Replica) CheckInvariants() error {
	if err := r.checkRecords(); err != nil {
		return err
	}
	if err := r.checkNames(); err != nil {
		return err
	}
	if c := r.recountCensus(); c != r.census {
		return fmt.Errorf("census %v, recounted %v", r.census, c)
	}
	want := make(map[nameID]map[nameID]int32)
	r.recs.each(func(_ recID, rec *record) {
		if !r.effectiveActive(rec) {
			return
		}
		for _, g := range r.sets.ids(rec.groups) {
			if want[g] == nil {
				want[g] = make(map[nameID]int32)
			}
			want[g][rec.user]++
		}
	})
	if r.groupOnline != nil && !maps.EqualFunc(want, r.groupOnline, maps.Equal) {
		return fmt.Errorf("group index %v, recomputed %v", r.groupOnline, want)
	}
	for u, slot := range r.accounts {
		if slot == 0 || int(slot) >= len(r.acctSlots) || r.acctSlots[slot] == nil || r.acctSlots[slot].User != u {
			return fmt.Errorf("account of %s in the wrong slot %d", u, slot)
		}
	}
	for u := range r.invisible {
		if a := r.account(u); a == nil || a.Override != OverrideInvisible {
			return fmt.Errorf("%s in the invisible set, account %+v", u, a)
		}
	}
	for u := range r.accounts {
		if _, in := r.invisible[u]; !in && r.account(u).Override == OverrideInvisible {
			return fmt.Errorf("invisible account of %s not in the invisible set", u)
		}
	}
	if n := len(r.acctSlots) - 1 - len(r.acctFree); n != len(r.accounts) {
		return fmt.Errorf("%d account slots held, %d accounts", n, len(r.accounts))
	}
	registers, err := r.checkLastSeen()
	if err != nil {
		return err
	}
	logged := 0
	origins := 0
	for name, ns := range r.nodes.all() {
		if ns.self != (name == r.cfg.Self.Node) {
			return fmt.Errorf("node %s: self %v", name, ns.self)
		}
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
	if origins != len(r.originList) {
		return fmt.Errorf("%d origin states, %d listed", origins, len(r.originList))
	}
	for i, st := range r.originList {
		if st.idx != uint32(i) {
			return fmt.Errorf("origin %s listed at %d, indexed %d", st.origin, i, st.idx)
		}
	}
	if len(r.byOrigin) != len(r.originList) {
		return fmt.Errorf("%d origins sorted, %d listed", len(r.byOrigin), len(r.originList))
	}
	for i, st := range r.sortedOrigins() {
		if r.originList[st.idx] != st {
			return fmt.Errorf("sorted origin %s is not the listed state at its index", st.origin)
		}
		if i > 0 && compareOrigins(r.byOrigin[i-1].origin, st.origin) >= 0 {
			return fmt.Errorf("origins %s and %s out of order", r.byOrigin[i-1].origin, st.origin)
		}
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
			switch it.kind {
			case itemAccount:
				var a *Account
				if int(it.ref) < len(r.acctSlots) {
					a = r.acctSlots[it.ref]
				}
				if a == nil || r.accounts[a.User] != it.ref || a.Origin != o || a.Version != it.version {
					err = fmt.Errorf("origin log of %s holds a stale account @%d", o, it.version)
				}
			case itemLastSeen:
				var ls *lastSeenRec
				if int(it.ref) < len(r.lastSeen.slots) {
					ls = &r.lastSeen.slots[it.ref]
				}
				if ls == nil || ls.version != it.version || r.originList[ls.origin] != st {
					err = fmt.Errorf("origin log of %s holds a stale last seen @%d", o, it.version)
				}
			case itemSession:
				rec := r.recs.get(recID(it.ref))
				if rec == nil || rec.origin != st.idx || rec.version != it.version {
					err = fmt.Errorf("origin log of %s holds a stale session @%d", o, it.version)
				}
			default:
				err = fmt.Errorf("origin log of %s item @%d names no record", o, it.version)
			}
			return err == nil
		})
		if err != nil {
			return err
		}
	}
	if want := r.keys.n + len(r.accounts) + registers; logged != want {
		return fmt.Errorf("origin logs hold %d items, records %d", logged, want)
	}
	if self := r.origin(r.cfg.Self); self.watermark != r.version {
		return fmt.Errorf("own watermark %d, version %d", self.watermark, r.version)
	}
	return nil
}

// checkRecords checks the session records against their indexes: the key
// index, the users' chains and the origin logs.
func (r *Replica) checkRecords() error {
	var err error
	held := 0
	r.recs.each(func(id recID, rec *record) {
		if err != nil {
			return
		}
		held++
		k := r.keyOf(rec)
		switch {
		case rec.user == 0 || rec.device == 0 || rec.id == 0:
			err = fmt.Errorf("record %d (%s) lacks a name", id, k)
		case r.keys.find(&r.recs, rec.user, rec.device) != id:
			err = fmt.Errorf("key index misses %s", k)
		case r.find(k) != id:
			err = fmt.Errorf("%s is not found by its names", k)
		case int(rec.origin) >= len(r.originList):
			err = fmt.Errorf("%s has unknown origin %d", k, rec.origin)
		case rec.counted != r.effectiveActive(rec):
			err = fmt.Errorf("%s counted=%v but effectively active=%v", k, rec.counted, !rec.counted)
		}
		if err != nil {
			return
		}
		it, ok := r.originList[rec.origin].log.Get(rec.version)
		if !ok || it.kind != itemSession || recID(it.ref) != id {
			err = fmt.Errorf("origin log of %s misses %s@%d", r.originList[rec.origin].origin, k, rec.version)
		}
	})
	if err != nil {
		return err
	}
	if held != r.keys.n {
		return fmt.Errorf("%d records held, key index holds %d", held, r.keys.n)
	}
	if slots := max(r.recs.n-1, 0) - len(r.recs.free); held != slots {
		return fmt.Errorf("%d records held, slab has %d slots and %d free", held, r.recs.n, len(r.recs.free))
	}
	// Every record is on its user's chain, once, in a well-linked chain.
	chained, users := 0, 0
	for u := range r.names.recs {
		head := r.names.recs[u].head
		if head == 0 {
			continue
		}
		users++
		var prev recID
		seen := map[nameID]bool{}
		for id := head; id != 0; id = r.recs.at(id).next {
			rec := r.recs.get(id)
			switch {
			case rec == nil:
				return fmt.Errorf("user %d chains a free slot %d", u, id)
			case rec.user != nameID(u):
				return fmt.Errorf("user %s chains a record of %s", r.names.str(nameID(u)), r.names.str(rec.user))
			case rec.prev != prev:
				return fmt.Errorf("user %s chain broken at %d", r.names.str(nameID(u)), id)
			case seen[rec.device]:
				return fmt.Errorf("user %s chains device %s twice", r.names.str(nameID(u)), r.names.str(rec.device))
			}
			seen[rec.device] = true
			prev = id
			chained++
		}
	}
	if chained != held || users != r.users {
		return fmt.Errorf("user chains hold %d records of %d users; %d records, %d users counted", chained, users, held, r.users)
	}
	return nil
}

// checkNames recounts every reference to the name table and the group
// sets, and checks the table's hash index.
func (r *Replica) checkNames() error {
	t := &r.names
	refs := make([]uint32, len(t.recs))
	setRefs := make([]uint32, len(r.sets.sets))
	extras := 0
	r.recs.each(func(_ recID, rec *record) {
		refs[rec.user]++
		refs[rec.device]++
		refs[rec.id]++
		setRefs[rec.groups]++
		if ex, ok := r.extras[rec.id]; ok {
			extras++
			if ex.meta != 0 {
				refs[ex.meta]++
			}
			if ex.info != 0 {
				refs[ex.info]++
			}
		}
	})
	if extras != len(r.extras) {
		return fmt.Errorf("%d records hold meta or info, %d held", extras, len(r.extras))
	}
	for i := 1; i < len(r.lastSeen.slots); i++ {
		if u := r.lastSeen.slots[i].user; u != 0 {
			refs[u]++
		}
	}
	for id := 1; id < len(r.sets.sets); id++ {
		set := &r.sets.sets[id]
		if set.refs != setRefs[id] {
			return fmt.Errorf("group set %v held %d times, counted %d", set.names, setRefs[id], set.refs)
		}
		if set.refs == 0 {
			continue
		}
		if r.sets.byKey[set.key] != setID(id) || len(set.ids) != len(set.names) {
			return fmt.Errorf("group set %v not indexed", set.names)
		}
		if len(set.ids) == 1 && t.recs[set.ids[0]].single != setID(id) {
			return fmt.Errorf("group set %v is not its group's single set", set.names)
		}
		for i, n := range set.ids {
			refs[n]++
			if !t.equal(n, set.names[i]) {
				return fmt.Errorf("group set %v names %q", set.names, t.str(n))
			}
		}
	}
	if len(r.sets.byKey) != r.sets.held() {
		return fmt.Errorf("%d group sets indexed, %d held", len(r.sets.byKey), r.sets.held())
	}
	interned, live := 0, 0
	for id := 1; id < len(t.recs); id++ {
		nr := &t.recs[id]
		if nr.refs != refs[id] {
			return fmt.Errorf("name %q held %d times, counted %d", t.str(nameID(id)), refs[id], nr.refs)
		}
		if nr.refs == 0 {
			continue
		}
		if s := nr.single; s != 0 && (int(s) >= len(r.sets.sets) || len(r.sets.sets[s].ids) != 1 || r.sets.sets[s].ids[0] != nameID(id)) {
			return fmt.Errorf("name %q names group set %d, not its single set", t.str(nameID(id)), s)
		}
		live++
		if nr.interned {
			interned++
			if t.lookup(t.str(nameID(id))) != nameID(id) {
				return fmt.Errorf("name %q not found by hash", t.str(nameID(id)))
			}
		}
	}
	if interned != t.interned || live != t.held() {
		return fmt.Errorf("name table holds %d names (%d interned), counted %d (%d)", t.held(), t.interned, live, interned)
	}
	return nil
}

// checkLastSeen checks the last-seen table: every slot found by its user,
// holding a write or a shown time, each slot holding a reference to its
// user's name. It returns how many slots hold a write.
func (r *Replica) checkLastSeen() (int, error) {
	t := &r.lastSeen
	held, writes := 0, 0
	for i := 1; i < len(t.slots); i++ {
		rec := &t.slots[i]
		if rec.user == 0 {
			continue
		}
		held++
		if t.byUser[rec.user] != uint32(i) {
			return 0, fmt.Errorf("last seen slot %d of %s not indexed", i, r.names.str(rec.user))
		}
		if rec.version == 0 && rec.shown == 0 {
			return 0, fmt.Errorf("last seen slot %d of %s holds nothing", i, r.names.str(rec.user))
		}
		if rec.version != 0 {
			writes++
			it, ok := r.originList[rec.origin].log.Get(rec.version)
			if !ok || it.kind != itemLastSeen || it.ref != uint32(i) {
				return 0, fmt.Errorf("last seen of %s @%d not in its origin's log", r.names.str(rec.user), rec.version)
			}
		}
	}
	if held != len(t.byUser) || held+len(t.free) != max(len(t.slots)-1, 0) {
		return 0, fmt.Errorf("last seen: %d slots held, %d indexed, %d free of %d", held, len(t.byUser), len(t.free), len(t.slots)-1)
	}
	return writes, nil
}
