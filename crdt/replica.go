package crdt

import (
	"errors"
	"fmt"
	"slices"
)

// ErrSuperseded is returned by PutLocal when the replica already holds a
// record for the key that the write could not beat: a newer epoch, or the same
// epoch owned by another gateway or already ended. The caller's connection
// for that key is stale.
var ErrSuperseded = errors.New("session superseded")

// entry is the replica's hold on one session record plus local bookkeeping.
type entry struct {
	// s is the record as merged: shared with the delta that brought it
	// and never modified (a newer record replaces the pointer), so the
	// replicas of one process that apply one delta hold one copy.
	s *Session
	// endedAt is the local time this replica first held the record's epoch
	// as terminal; meaningless while active (0 is a valid time: a virtual
	// clock may start there). Tombstone GC counts from it, so owner clock
	// skew cannot shorten a tombstone's life.
	endedAt int64
	// st is the state of s's origin, whose log names this entry: a record
	// replaced by another origin's, or removed, leaves that log without a
	// node-table lookup. Origin states are never removed.
	st *originState
	// counted records whether s is counted in the group index, i.e. it was
	// effectively active when last indexed.
	counted bool
}

// tombstone is a GC queue item: the key whose record ended at endedAt.
type tombstone struct {
	key     Key
	version uint64
	origin  Origin
	endedAt int64
}

// Replica is one node's copy of the replicated presence state, with the
// indexes queries need. It is not safe for concurrent use.
type Replica struct {
	cfg     Config
	hlc     HLC
	version uint64 // our origin's write counter

	numSessions int // records held, tombstones included
	accounts    map[string]*Account
	// nodes holds, per gateway node, its newest incarnation seen, whether
	// it is marked down, and its origins' states (node.go).
	nodes      strMap[*nodeState]
	numOrigins int
	down       map[string]*nodeState // the nodes marked down

	// Indexes, maintained on every change.
	byUser strMap[devices] // user -> its entries by device
	// groupOnline maps group -> user -> active sessions in group. It is
	// built by the first group query (groupIndex) and maintained from then
	// on: a replica nobody asks about groups (the simulator's) does not pay
	// for it on every merge. entry.counted is maintained either way.
	groupOnline map[string]map[string]int

	tombstones []tombstone // FIFO by endedAt

	// census counts the session records by owner and projected state
	// (census.go): changed with every record and every counted flag.
	census censusCounts

	floors     map[Key]epochFloor // epochs of collected tombstones (epochfloor.go)
	floorQueue []floorItem
}

// NewReplica returns an empty replica writing as cfg.Self.
func NewReplica(cfg Config) (*Replica, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &Replica{
		cfg:      cfg,
		accounts: make(map[string]*Account),
		nodes:    newStrMap[*nodeState](),
		down:     make(map[string]*nodeState),
		byUser:   newStrMap[devices](),
		floors:   make(map[Key]epochFloor),
	}
	self := r.nodeOf(cfg.Self.Node)
	self.latest, self.heard = cfg.Self.Incarnation, true
	r.addOrigin(self, cfg.Self)
	return r, nil
}

// Self returns the origin this replica writes as.
func (r *Replica) Self() Origin { return r.cfg.Self }

// Config returns the replica's validated configuration.
func (r *Replica) Config() Config { return r.cfg }

// PutLocal writes a session record as this replica's origin: a connect, a
// status or group change, or the end of the session. The caller fills User,
// Device, ID, Epoch, State, Status, Groups and ExpiresAt; PutLocal stamps Seq,
// Gateway, Origin, Version and Updated, applies the write and returns the
// delta to disseminate.
//
// The write must be the newest for its key: a first epoch greater than any
// record held, or a later write of the same active session. Otherwise it
// returns ErrSuperseded and changes nothing.
func (r *Replica) PutLocal(s Session, now int64) (Delta, error) {
	s.Origin = r.cfg.Self
	s.Gateway = r.cfg.Self.Node
	s.Groups = NormalizeGroups(slices.Clone(s.Groups))
	s.Updated = now
	if s.User == "" || s.Device == "" || s.ID == "" || s.Epoch == 0 {
		return Delta{}, fmt.Errorf("crdt: local session needs user, device, id and epoch: %+v", s)
	}
	s.Seq = 1
	if f := r.epochFloorOf(s.Key()); s.Epoch <= f {
		return Delta{}, fmt.Errorf("%w: %s had epoch %d (collected); %d is not above it", ErrSuperseded, s.Key(), f, s.Epoch)
	}
	if cur := r.userEntry(s.Key()); cur != nil {
		switch {
		case cur.s.Epoch > s.Epoch:
			return Delta{}, fmt.Errorf("%w: %s holds epoch %d > %d", ErrSuperseded, s.Key(), cur.s.Epoch, s.Epoch)
		case cur.s.Epoch == s.Epoch:
			if cur.s.Origin != s.Origin || cur.s.ID != s.ID || cur.s.State.Terminal() {
				return Delta{}, fmt.Errorf("%w: %s epoch %d already taken or ended", ErrSuperseded, s.Key(), s.Epoch)
			}
			s.Seq = cur.s.Seq + 1
		}
	}
	r.version++
	s.Version = r.version
	st := r.origin(r.cfg.Self)
	st.watermark = r.version
	out := &s
	r.mergeSession(st, out, now, true)
	return Delta{Since: s.Version - 1, Session: out}, nil
}

// PutAccountLocal writes a user's account record as this replica's origin,
// stamping it with the hybrid logical clock at wall time now.
func (r *Replica) PutAccountLocal(user string, override Override, authoritativeDevice string, now int64) (Delta, error) {
	if user == "" {
		return Delta{}, errors.New("crdt: account needs a user")
	}
	a := Account{
		User: user, Override: override, AuthoritativeDevice: authoritativeDevice,
		Stamp: r.hlc.Now(now), Writer: r.cfg.Self.Node, Origin: r.cfg.Self,
	}
	r.version++
	a.Version = r.version
	r.origin(r.cfg.Self).watermark = r.version
	r.mergeAccount(&a)
	out := a
	return Delta{Since: a.Version - 1, Account: &out}, nil
}

// Apply merges a delta received from another replica at local time now. It
// reports whether the replica's state changed (the delta's user may need an
// event) and the users whose sessions ended because the delta revealed a new
// incarnation of their gateway. An invalid delta is an error and changes
// nothing; a stale or duplicate one is not an error.
func (r *Replica) Apply(d Delta, now int64) (changed bool, dropped []string, err error) {
	return r.ApplyVia(nil, d, now)
}

// OriginRef remembers where a replica keeps one origin's state, so that a
// caller applying many deltas of that origin, one after another or across
// thousands of replicas (the simulator keeps one per replica and origin),
// spares Apply the node-table lookup. The zero OriginRef holds nothing; a
// ref that holds another replica's or another origin's state is ignored
// and refilled.
type OriginRef struct {
	r  *Replica
	st *originState
}

// ApplyVia is Apply that looks d's origin up through ref first and leaves
// in ref where the origin's state is; a nil ref is Apply. The result is
// Apply's, whatever ref holds.
func (r *Replica) ApplyVia(ref *OriginRef, d Delta, now int64) (changed bool, dropped []string, err error) {
	if err := d.Validate(); err != nil {
		return false, nil, err
	}
	o := d.Origin()
	var ns *nodeState
	var st *originState
	if ref != nil && ref.r == r && ref.st.origin == o {
		st, ns = ref.st, ref.st.node
	} else {
		ns = r.nodeOf(o.Node)
		st = ns.origin(o.Incarnation)
	}
	if st == nil || !st.latest {
		ok, latest, retiredUsers := r.admit(ns, o, now)
		if dropped = retiredUsers; !ok {
			return false, dropped, nil
		}
		if st == nil { // admit creates no origin state
			st = r.addOrigin(ns, o)
		}
		st.latest = latest
	}
	if ref != nil {
		ref.r, ref.st = r, st
	}
	if d.Version() <= st.watermark {
		return false, dropped, nil
	}
	if d.Session != nil {
		changed = r.mergeSession(st, d.Session, now, true)
	} else {
		r.hlc.Observe(now, d.Account.Stamp)
		changed = r.mergeAccount(d.Account)
	}
	st.observe(d.Since, d.Version(), r.cfg.MaxPendingRanges)
	return changed, dropped, nil
}

// admit decides whether records of origin o may be merged, retiring older
// incarnations of o's node when o is newer. Our own origin, and newer
// (impostor) incarnations of our node, are never admitted from outside: we
// are the only writer of our records. Older incarnations of any node,
// ours included, are: their records merge like any other (a restarted node
// needs the account settings it wrote in its previous life), and the
// projection shows their sessions ended (see retired). It also reports
// whether o is (now) its node's latest incarnation, and returns the users
// whose sessions a retirement ended.
// ns is the state of o's node (nodeOf).
func (r *Replica) admit(ns *nodeState, o Origin, now int64) (ok, latest bool, retiredUsers []string) {
	if o.Node == r.cfg.Self.Node && o.Incarnation >= r.cfg.Self.Incarnation {
		return false, false, nil
	}
	inc, known := ns.latest, ns.heard
	if known && o.Incarnation <= inc {
		return true, o.Incarnation == inc, nil
	}
	ns.latest, ns.heard = o.Incarnation, true
	if !known {
		return true, true, nil
	}
	old := ns.origin(inc)
	if old == nil {
		return true, true, nil
	}
	old.latest = false
	return true, true, r.retire(old, now)
}

// retired reports whether o is an older incarnation of its node than one
// this replica has heard from. A retired origin's sessions have ended with
// it: the projection shows them expired, as it does for a node marked down,
// and GC collects them like tombstones.
//
// Retirement does not rewrite the records. Merging compares them as they
// were written, so every replica keeps the same winner for a key whether it
// learned of the new incarnation before or after it saw the record: the
// retired session still beats the older epoch it replaced on another
// gateway, and still loses to a record that beat it before. (Deleting or
// rewriting them as expired at retirement would change winners on some
// replicas and not others: testdata/crdt/retire_moved_session.txt.)
func (r *Replica) retired(o Origin) bool {
	return r.nodes.get(o.Node).retired(o.Incarnation)
}

// retire ends, in the projection, the active sessions of an origin (st)
// that has just been retired at local time now, queues them for GC and
// returns the users whose presence changed. Older incarnations were
// retired before.
func (r *Replica) retire(st *originState, now int64) []string {
	o := st.origin
	var users []string
	st.log.Ascend(func(it logItem) bool {
		e := it.e
		if e == nil {
			return true // an account
		}
		if e.s.State != StateActive {
			return true // a tombstone already, queued when it ended
		}
		if e.counted {
			users = append(users, e.s.User)
		}
		e.endedAt = now
		r.recount(e, st.node)
		r.tombstones = append(r.tombstones, tombstone{key: e.s.Key(), version: e.s.Version, origin: o, endedAt: now})
		return true
	})
	return sortedUnique(users)
}

// ended reports whether a record has ended in this replica's view: terminal,
// or written by a retired incarnation. Ended records are GC'd after the
// tombstone horizon.
func (r *Replica) ended(s *Session) bool {
	return s.State.Terminal() || r.retired(s.Origin)
}

// dropSessions removes every session record of an origin, raising its GC
// floor so lagging peers get a full snapshot, and returns the users whose
// presence may have changed.
func (r *Replica) dropSessions(st *originState, now int64) []string {
	var victims []*entry
	st.log.Ascend(func(it logItem) bool {
		if it.e != nil {
			victims = append(victims, it.e)
		}
		return true
	})
	users := make([]string, 0, len(victims))
	for _, e := range victims {
		if e.counted {
			users = append(users, e.s.User)
		}
		st.gcFloor = max(st.gcFloor, e.s.Version)
		r.raiseFloor(e.s.Key(), e.s.Epoch, now)
		r.removeEntry(e)
	}
	return users
}

// mergeSession keeps the greater of the held record and s. It reports
// whether s was taken. st is the state of s.Origin (callers have it). A
// taken s is kept by pointer when owned (the caller must not modify it
// afterwards), else copied.
func (r *Replica) mergeSession(st *originState, s *Session, now int64, owned bool) bool {
	k := s.Key()
	cur := r.userEntry(k)
	if cur != nil && CompareSessions(cur.s, s) >= 0 {
		return false
	}
	if st.versionTaken(s.Version, cur, nil) {
		return false
	}
	if !owned {
		s = s.Clone()
	}
	ended := s.State.Terminal() || st.node.retired(s.Origin.Incarnation)
	var endedAt int64
	if ended {
		endedAt = now
		// Keep the age of a tombstone only when the new record ends the same
		// epoch. The end of a newer epoch starts a new horizon: inheriting
		// the older end's age would collect it early, and a delayed active
		// write of the newer epoch would then revive the session
		// (testdata/crdt/tombstone_epochs.txt).
		if cur != nil && r.ended(cur.s) && cur.s.Epoch == s.Epoch {
			endedAt = cur.endedAt
		}
	}
	var e *entry
	if cur == nil {
		e = &entry{s: s, endedAt: endedAt, st: st}
		r.indexUser(e)
		r.numSessions++
		r.tally(e, 1)
	} else {
		// The new record takes the old one's entry, which every index
		// already points to under this key: only the origin log and, when
		// the groups differ, the group counts change (recount below brings
		// the counts in line, as for a new entry).
		e = cur
		r.tally(cur, -1)
		cur.st.log.Delete(logItem{version: cur.s.Version})
		if cur.counted && !slices.Equal(cur.s.Groups, s.Groups) {
			r.uncount(cur)
		}
		e.s = s
		e.st = st
		e.endedAt = endedAt
		r.tally(e, 1)
	}
	st.log.ReplaceOrInsert(logItem{version: s.Version, e: e})
	r.recount(e, st.node)
	if ended {
		r.tombstones = append(r.tombstones, tombstone{key: k, version: s.Version, origin: s.Origin, endedAt: e.endedAt})
		r.capUserTombstones(k.User, e, now)
	}
	return true
}

// versionTaken reports whether the origin's log already names another
// record at version v. An honest origin never writes two records with one
// version; a corrupt or hostile peer could, and taking both would leave the
// log naming only one of them. The first one held stays.
func (r *Replica) versionTaken(o Origin, v uint64, e *entry, a *Account) bool {
	st := r.origin(o)
	if st == nil {
		return false
	}
	return st.versionTaken(v, e, a)
}

// versionTaken's e or a is the record the replica holds for the new
// record's slot, nil when it holds none: the log names another record at v
// if it names anything but that one (an item always names one record).
func (st *originState) versionTaken(v uint64, e *entry, a *Account) bool {
	it, ok := st.log.Get(v)
	return ok && (it.e != e || it.a != a)
}

// removeEntry deletes a session record and all index references to it.
func (r *Replica) removeEntry(e *entry) {
	k := e.s.Key()
	r.tally(e, -1)
	if e.counted {
		r.uncount(e)
	}
	r.unindexUser(k)
	r.numSessions--
	e.st.log.Delete(logItem{version: e.s.Version})
}

func (r *Replica) mergeAccount(a *Account) bool {
	cur := r.accounts[a.User]
	if cur != nil && CompareAccounts(cur, a) >= 0 {
		return false
	}
	if r.versionTaken(a.Origin, a.Version, nil, cur) {
		return false
	}
	if cur != nil {
		if st := r.origin(cur.Origin); st != nil {
			st.log.Delete(logItem{version: cur.Version})
		}
	}
	c := *a
	r.accounts[a.User] = &c
	r.originState(a.Origin).log.ReplaceOrInsert(logItem{version: a.Version, a: &c})
	return true
}

// effectiveActive reports whether a record counts as active in this
// replica's projection: active, written by the newest incarnation of its
// gateway that this replica knows, and its gateway not marked down.
func (r *Replica) effectiveActive(s *Session) bool {
	return r.effectiveActiveIn(s, r.nodes.get(s.Origin.Node))
}

// effectiveActiveIn is effectiveActive given the state of the record's
// node (its gateway: Validate makes them one).
func (r *Replica) effectiveActiveIn(s *Session, ns *nodeState) bool {
	if s.State != StateActive || ns.retired(s.Origin.Incarnation) {
		return false
	}
	return ns == nil || !ns.down || s.Gateway == r.cfg.Self.Node
}

// recount brings e's group counts in line with its effective state; ns is
// the state of e's node.
func (r *Replica) recount(e *entry, ns *nodeState) {
	want := r.effectiveActiveIn(e.s, ns)
	switch {
	case want && !e.counted:
		r.tally(e, -1)
		e.counted = true
		r.tally(e, 1)
		if r.groupOnline != nil {
			r.countGroups(e)
		}
	case !want && e.counted:
		r.tally(e, -1)
		r.uncount(e)
		r.tally(e, 1)
	}
}

// countGroups adds a counted entry to the group index.
func (r *Replica) countGroups(e *entry) {
	for _, g := range e.s.Groups {
		users := r.groupOnline[g]
		if users == nil {
			users = make(map[string]int)
			r.groupOnline[g] = users
		}
		users[e.s.User]++
	}
}

// groupIndex returns the group index, building it from the counted entries
// on first use.
func (r *Replica) groupIndex() map[string]map[string]int {
	if r.groupOnline == nil {
		r.groupOnline = make(map[string]map[string]int)
		r.entries(func(e *entry) {
			if e.counted {
				r.countGroups(e)
			}
		})
	}
	return r.groupOnline
}

func (r *Replica) uncount(e *entry) {
	e.counted = false
	if r.groupOnline == nil {
		return
	}
	for _, g := range e.s.Groups {
		users := r.groupOnline[g]
		if users[e.s.User]--; users[e.s.User] <= 0 {
			delete(users, e.s.User)
			if len(users) == 0 {
				delete(r.groupOnline, g)
			}
		}
	}
}

func sortedUnique(users []string) []string {
	slices.Sort(users)
	return slices.Compact(users)
}
