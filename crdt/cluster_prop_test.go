package crdt

import (
	"bytes"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// The checks the model cluster (cluster_model_test.go) runs after every step
// and at the end, the reference it is compared with, and the tests that run
// it.

// check runs after every step.
func (w *world) check() {
	t := w.t
	for _, m := range w.nodes {
		r := m.r
		if err := r.CheckInvariants(); err != nil {
			w.fatalf("%s: %v", r.Self(), err)
		}
		ss, _ := r.Snapshot()
		now := map[Key]bool{}
		for i := range ss {
			cur := ss[i]
			k := cur.Key()
			now[k] = true
			// A node cut off past a GC may lose, to a full snapshot, the
			// only copy of a retired incarnation's write, which the others
			// gave up as lost; then an older record comes back.
			if prev, ok := m.held[k]; ok && !(m.lagged && w.retiredOrigin(prev.Origin)) {
				if cur.Epoch < prev.Epoch {
					w.fatalf("%s: %s went from epoch %d to a lower epoch %d", r.Self(), k, prev.Epoch, cur.Epoch)
				}
				if prev.State.Terminal() && cur.State == StateActive && cur.Epoch <= prev.Epoch {
					w.fatalf("%s: %s revived: %s epoch %d replaced by active epoch %d", r.Self(), k, prev.State, prev.Epoch, cur.Epoch)
				}
				if CompareSessions(&cur, &prev) < 0 {
					w.fatalf("%s: %s moved backwards:\nwas %+v\nnow %+v", r.Self(), k, prev, cur)
				}
			}
			// Even after its record was collected, a key never shows an
			// active record below one this replica once held: GC waits out
			// every late write (the tombstone horizon). A retired
			// incarnation's writes may come later still, since nobody can
			// fill the gaps it left, but they only ever show as ended.
			if ever, ok := m.ever[k]; ok && !(m.lagged && w.retiredOrigin(ever.Origin)) && cur.State == StateActive && !w.retiredOrigin(cur.Origin) && CompareSessions(&cur, &ever) < 0 {
				w.fatalf("%s: %s revived after GC:\nonce held %+v\nnow %+v", r.Self(), k, ever, cur)
			}
			m.held[k] = cur
			if ever, ok := m.ever[k]; !ok || CompareSessions(&cur, &ever) > 0 {
				m.ever[k] = cur
			}
		}
		for k := range m.held {
			if !now[k] {
				delete(m.held, k)
			}
		}
		for _, u := range propUsers {
			checkPresence(t, r, u, !m.noGroupQuery)
		}
	}
}

// retiredOrigin reports whether o is an older incarnation than the live one.
func (w *world) retiredOrigin(o Origin) bool {
	for _, m := range w.nodes {
		if self := m.r.Self(); self.Node == o.Node {
			return o.Incarnation < self.Incarnation
		}
	}
	return false
}

// checkPresence compares a replica's presence and, when groups is set, its
// group index for a user with a recomputation from its projected records
// through Aggregate. CheckInvariants (in check) compares the whole group
// index, once built, with one recomputed from the records.
func checkPresence(t *rapid.T, r *Replica, u string, groups bool) {
	var recs []*Session
	for _, s := range r.UserSessions(u) {
		recs = append(recs, &s)
	}
	var acct *Account
	if a, ok := r.Account(u); ok {
		acct = &a
	}
	want := Aggregate(u, recs, acct, 0)
	switch {
	case !want.Online:
		want.LastSeen = r.LastSeen(u, 0) // the register is no input of Aggregate
	case want.Invisible:
		want.hiddenLastSeen = r.LastSeen(u, 0) // what Public shows
	}
	if got := r.Presence(u, 0); !got.Equal(want) {
		t.Fatalf("%s: presence of %s is %+v, its records give %+v", r.Self(), u, got, want)
	}
	if !groups {
		return
	}
	for _, g := range propGroups {
		in := false
		for _, s := range recs {
			in = in || (s.State == StateActive && s.InGroup(g))
		}
		if got := slices.Contains(r.GroupOnlineUsers(g), u); got != in {
			t.Fatalf("%s: %s listed online in %s: %v, records say %v", r.Self(), u, g, got, in)
		}
	}
}

// finish delivers or drops what is still in flight, marks every gateway up,
// runs anti-entropy to a fixed point and checks convergence, then collects
// every tombstone and compares with the reference.
func (w *world) finish() {
	t := w.t
	for j, m := range w.nodes {
		for _, idx := range m.inbox {
			if rapid.Bool().Draw(t, "late") {
				w.logf("%s <- #%d late", m.r.Self(), idx)
				w.apply(j, idx)
			}
		}
		m.inbox = nil
		for g := range w.writers() {
			m.r.SetNodeUp(fmt.Sprintf("g%d", g+1))
		}
		m.noGroupQuery = false // the index is built now, if it was not
	}
	w.check()
	all := make([]int, len(w.nodes))
	for j := range all {
		all[j] = j
	}
	w.logf("final stabilize")
	w.stabilize(all)
	w.check()
	// Before GC: identical records, tombstones included, unless some GC
	// already ran (a collected tombstone is not sent again, by design).
	snap := canonicalSnapshot
	if w.gcRan {
		snap = liveSnapshot
	}
	want := snap(w.nodes[0].r)
	for _, m := range w.nodes[1:] {
		if got := snap(m.r); !bytes.Equal(got, want) {
			w.fatalf("%s and %s differ after anti-entropy:\n%s\n%s", w.nodes[0].r.Self(), m.r.Self(),
				dumpReplica(w.nodes[0].r), dumpReplica(m.r))
		}
	}
	w.now += 2*int64(propHorizon) + int64(time.Second)
	for _, m := range w.nodes {
		m.r.GC(w.now)
	}
	w.check()
	want = canonicalSnapshot(w.nodes[0].r)
	for _, m := range w.nodes[1:] {
		if got := canonicalSnapshot(m.r); !bytes.Equal(got, want) {
			w.fatalf("%s and %s differ after GC:\n%s\n%s", w.nodes[0].r.Self(), m.r.Self(),
				dumpReplica(w.nodes[0].r), dumpReplica(m.r))
		}
	}
	for _, m := range w.nodes {
		if m.lagged {
			// The contract was broken for one node: it may have
			// collected the only copy of a record that would have won,
			// so the reference (the greatest of all records) need not
			// hold. The replicas must still agree, as checked above.
			return
		}
	}
	ref := w.reference()
	for _, m := range w.nodes {
		ss, as := m.r.Snapshot()
		if !reflect.DeepEqual(normSessions(ss), normSessions(ref.sessions)) || !reflect.DeepEqual(as, ref.accounts) ||
			!reflect.DeepEqual(m.r.LastSeenSnapshot(), ref.lastSeen) {
			w.fatalf("%s after GC:\n%s\nreference:\n%s", m.r.Self(), dumpReplica(m.r), ref.dump())
		}
		for _, u := range propUsers {
			want := ref.presence(u)
			if !want.Online {
				// The register's write is the reference's (checked
				// above); the time shown for a failed gateway is
				// each replica's own, and never earlier than it.
				want.LastSeen = m.r.LastSeen(u, 0)
				if want.LastSeen < ref.lastSeenAt(u) {
					w.fatalf("%s: last seen of %s %d, before the register's %d", m.r.Self(), u, want.LastSeen, ref.lastSeenAt(u))
				}
			} else if want.Invisible {
				want.hiddenLastSeen = m.r.LastSeen(u, 0) // what Public shows
			}
			if got := m.r.Presence(u, 0); !got.Equal(want) {
				w.fatalf("%s: presence of %s %+v, reference %+v", m.r.Self(), u, got, want)
			}
		}
	}
}

// liveSnapshot is canonicalSnapshot without the records the projection shows
// ended: tombstones, and sessions of retired incarnations.
func liveSnapshot(r *Replica) []byte {
	ss, as := r.Snapshot()
	ss = slices.DeleteFunc(ss, func(s Session) bool {
		v, _ := r.Session(s.Key())
		return v.State != StateActive
	})
	b, err := AppendSync(nil, Sync{{Origin: Origin{Node: "snapshot"}, Sessions: ss, Accounts: as, LastSeen: r.LastSeenSnapshot()}})
	if err != nil {
		panic(err)
	}
	return b
}

func normSessions(ss []Session) []Session {
	out := make([]Session, len(ss))
	for i, s := range ss {
		if len(s.Groups) == 0 {
			s.Groups = nil
		}
		out[i] = s
	}
	return out
}

// refState is the reference model's answer: for each key, the greatest
// record (by CompareSessions) of all that reached a live replica, kept only
// if it is active and written by its gateway's live incarnation (every
// tombstone, and every session of a retired incarnation, is collected); for
// each user, the greatest account record.
type refState struct {
	sessions []Session
	accounts []Account
	lastSeen []LastSeen // the greatest write per user, sorted by user
}

func (ref refState) lastSeenAt(u string) int64 {
	for _, ls := range ref.lastSeen {
		if ls.User == u {
			return ls.At
		}
	}
	return 0
}

func (w *world) reference() refState {
	latest := map[string]uint64{}
	for _, m := range w.nodes {
		if m.writer {
			latest[m.r.Self().Node] = m.r.Self().Incarnation
		}
	}
	bestS := map[Key]Session{}
	bestA := map[string]Account{}
	bestL := map[string]LastSeen{}
	for idx, d := range w.produced {
		if len(w.reached[idx]) == 0 {
			continue // only a dead incarnation ever held it
		}
		if d.LastSeen != nil {
			bestL[d.LastSeen.User] = MergeLastSeen(bestL[d.LastSeen.User], *d.LastSeen)
			continue
		}
		if d.Session != nil {
			s := *d.Session
			if cur, ok := bestS[s.Key()]; !ok || CompareSessions(&s, &cur) > 0 {
				bestS[s.Key()] = s
			}
		} else {
			a := *d.Account
			if cur, ok := bestA[a.User]; !ok || CompareAccounts(&a, &cur) > 0 {
				bestA[a.User] = a
			}
		}
	}
	var ref refState
	for _, k := range slices.SortedFunc(maps.Keys(bestS), func(a, b Key) int {
		if a.User != b.User {
			return compareStrings(a.User, b.User)
		}
		return compareStrings(a.Device, b.Device)
	}) {
		if s := bestS[k]; s.State == StateActive && s.Origin.Incarnation == latest[s.Origin.Node] {
			ref.sessions = append(ref.sessions, s)
		}
	}
	for _, u := range slices.Sorted(maps.Keys(bestA)) {
		ref.accounts = append(ref.accounts, bestA[u])
	}
	if ref.accounts == nil {
		ref.accounts = []Account{}
	}
	ref.lastSeen = []LastSeen{}
	for _, u := range slices.Sorted(maps.Keys(bestL)) {
		ref.lastSeen = append(ref.lastSeen, bestL[u])
	}
	return ref
}

func (ref refState) presence(u string) Presence {
	var recs []*Session
	for i := range ref.sessions {
		if ref.sessions[i].User == u {
			recs = append(recs, &ref.sessions[i])
		}
	}
	var acct *Account
	for i := range ref.accounts {
		if ref.accounts[i].User == u {
			acct = &ref.accounts[i]
		}
	}
	return Aggregate(u, recs, acct, 0)
}

func (ref refState) dump() string {
	var b bytes.Buffer
	for i := range ref.sessions {
		s := &ref.sessions[i]
		fmt.Fprintf(&b, "%s origin=%s v%d\n", formatSession(s), s.Origin, s.Version)
	}
	for _, a := range ref.accounts {
		fmt.Fprintf(&b, "account %s override=%s auth=%s origin=%s v%d\n", a.User, a.Override, orDash(a.AuthoritativeDevice), a.Origin, a.Version)
	}
	for _, ls := range ref.lastSeen {
		fmt.Fprintf(&b, "last seen %s at=%d origin=%s v%d\n", ls.User, ls.At, ls.Origin, ls.Version)
	}
	return b.String()
}

func deltaEqual(a, b *Delta) bool {
	if a.Since != b.Since || (a.Session == nil) != (b.Session == nil) || (a.Account == nil) != (b.Account == nil) ||
		(a.LastSeen == nil) != (b.LastSeen == nil) {
		return false
	}
	if a.LastSeen != nil {
		return *a.LastSeen == *b.LastSeen
	}
	if a.Session != nil {
		x, y := *a.Session, *b.Session
		x.Groups, y.Groups = normSessions([]Session{x})[0].Groups, normSessions([]Session{y})[0].Groups
		return reflect.DeepEqual(x, y)
	}
	return *a.Account == *b.Account
}

// TestConvergence: 3 to 5 replicas (2 or 3 of them gateways) under random
// writes, deliveries in any order with duplicates and drops, anti-entropy,
// failure suspicions, gateway restarts and GC, converge to the reference.
func TestConvergence(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) { runWorld(t, false) })
}

// TestConvergenceLagging: as TestConvergence, with an observer sometimes
// cut off while the others collect tombstones, so that it comes back below
// their GC floors and is repaired by a full snapshot; no restarts (see
// world.allowLag).
func TestConvergenceLagging(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) { runWorld(t, true) })
}

func runWorld(t *rapid.T, lag bool) {
	w := newWorld(t, rapid.IntRange(2, 3).Draw(t, "writers"), rapid.IntRange(1, 2).Draw(t, "observers"))
	w.codec = rapid.Bool().Draw(t, "codec")
	w.allowLag = lag
	for range rapid.IntRange(20, 150).Draw(t, "steps") {
		w.step()
	}
	w.finish()
}
