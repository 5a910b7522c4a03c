package crdt

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrSuperseded is returned by PutLocal when the replica already holds a
// record for the key that the write could not beat: a newer epoch, or the same
// epoch owned by another gateway or already ended. The caller's connection
// for that key is stale.
var ErrSuperseded = errors.New("session superseded")

// tombstone is a GC queue item: the record that ended at endedAt, named by
// its slot, origin and version (a slot reused since holds another record).
type tombstone struct {
	rec     recID
	origin  uint32 // index in originList
	version uint64
	endedAt int64
}

// Replica is one node's copy of the replicated presence state, with the
// indexes queries need. It is not safe for concurrent use.
type Replica struct {
	cfg     Config
	hlc     HLC
	version uint64 // our origin's write counter

	// Account records: accounts maps a user to its record's slot in
	// acctSlots (slot 0 unused), which origin logs name.
	accounts  map[string]uint32
	acctSlots []*Account
	acctFree  []uint32
	// invisible holds the users whose account record's override is
	// OverrideInvisible, lapsed or not (invisible.go).
	invisible map[string]struct{}
	// nodes holds, per gateway node, its newest incarnation seen, whether
	// it is marked down, and its origins' states (node.go).
	nodes strMap[*nodeState]
	down  map[string]*nodeState // the nodes marked down
	// originList holds every origin state (never removed), by the index
	// records keep of their origin.
	originList []*originState
	// byOrigin holds the same states sorted by origin (compareOrigins)
	// up to sorted, and those added since after them: digests and diffs
	// walk origins in that order (sortedOrigins sorts the rest in first),
	// while a replica learning of thousands of origins one delta at a
	// time appends each.
	byOrigin []*originState
	sorted   int

	// Session records (records.go): the slab, their strings and group
	// sets, and the key index. A user's records are chained from its name.
	recs  recSlab
	names nameTable
	sets  groupSets
	keys  keyTable
	users int // users with session records: non-empty chains
	// extras holds the meta and info of the records that have any, by
	// the name ID of the record's session ID (one per record, not
	// interned): a record without them costs nothing more.
	extras map[nameID]recExtra
	// groupOnline maps group -> user -> active sessions in group. It is
	// built by the first group query (groupIndex) and maintained from then
	// on: a replica nobody asks about groups (the simulator's) does not pay
	// for it on every merge. record.counted is maintained either way.
	groupOnline map[nameID]map[nameID]int32

	tombstones []tombstone // FIFO by endedAt

	// census counts the session records by owner and projected state
	// (census.go): changed with every record and every counted flag.
	census censusCounts

	floors     map[Key]epochFloor // epochs of collected tombstones (epochfloor.go)
	floorQueue []floorItem

	lastSeen lastSeenTable // per-user last-seen registers (lastseen.go)
}

// NewReplica returns an empty replica writing as cfg.Self.
func NewReplica(cfg Config) (*Replica, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &Replica{
		cfg:       cfg,
		accounts:  make(map[string]uint32),
		acctSlots: make([]*Account, 1),
		invisible: make(map[string]struct{}),
		nodes:     newStrMap[*nodeState](),
		down:      make(map[string]*nodeState),
		names:     newNameTable(),
		sets:      newGroupSets(),
		floors:    make(map[Key]epochFloor),
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
	s.Seq, s.Version = 1, r.version+1
	if err := s.validate(); err != nil { // what every peer would refuse
		return Delta{}, fmt.Errorf("crdt: local session: %w", err)
	}
	if f := r.epochFloorOf(s.Key()); s.Epoch <= f {
		return Delta{}, fmt.Errorf("%w: %s had epoch %d (collected); %d is not above it", ErrSuperseded, s.Key(), f, s.Epoch)
	}
	if id := r.find(s.Key()); id != 0 {
		cur := r.recs.at(id)
		switch {
		case cur.epoch > s.Epoch:
			return Delta{}, fmt.Errorf("%w: %s holds epoch %d > %d", ErrSuperseded, s.Key(), cur.epoch, s.Epoch)
		case cur.epoch == s.Epoch:
			if r.originList[cur.origin].origin != s.Origin || !r.names.equal(cur.id, s.ID) || cur.state.Terminal() {
				return Delta{}, fmt.Errorf("%w: %s epoch %d already taken or ended", ErrSuperseded, s.Key(), s.Epoch)
			}
			s.Seq = cur.seq + 1
		}
	}
	r.version++
	s.Version = r.version
	st := r.origin(r.cfg.Self)
	st.watermark = r.version
	r.mergeSession(st, &s, now)
	return Delta{Since: s.Version - 1, Session: &s}, nil
}

// PutAccountLocal writes a user's account record as this replica's origin,
// stamping it with the hybrid logical clock at wall time now.
func (r *Replica) PutAccountLocal(user string, override Override, authoritativeDevice string, now int64) (Delta, error) {
	return r.PutAccount(Account{User: user, Override: override, AuthoritativeDevice: authoritativeDevice}, now)
}

// PutAccount is PutAccountLocal of every setting: the caller fills User,
// Override, AuthoritativeDevice, Text, Emoji and Until; PutAccount stamps
// the rest. A write every peer would refuse (an over-long text) is an
// error and changes nothing.
func (r *Replica) PutAccount(a Account, now int64) (Delta, error) {
	if a.User == "" {
		return Delta{}, errors.New("crdt: account needs a user")
	}
	a.Stamp, a.Writer, a.Origin = r.hlc.Now(now), r.cfg.Self.Node, r.cfg.Self
	a.Version = r.version + 1
	if err := a.validate(); err != nil {
		return Delta{}, fmt.Errorf("crdt: local account: %w", err)
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
// nothing; a stale or duplicate one is not an error. The replica keeps a
// copy of what it takes: the delta stays the caller's.
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
	switch {
	case d.Session != nil:
		changed = r.mergeSession(st, d.Session, now)
	case d.Account != nil:
		r.hlc.Observe(now, d.Account.Stamp)
		changed = r.mergeAccount(d.Account)
	default:
		changed = r.mergeLastSeen(d.LastSeen, now)
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

// retired reports whether st's origin is an older incarnation of its node
// than one this replica has heard from. A retired origin's sessions have
// ended with it: the projection shows them expired, as it does for a node
// marked down, and GC collects them like tombstones.
//
// Retirement does not rewrite the records. Merging compares them as they
// were written, so every replica keeps the same winner for a key whether it
// learned of the new incarnation before or after it saw the record: the
// retired session still beats the older epoch it replaced on another
// gateway, and still loses to a record that beat it before. (Deleting or
// rewriting them as expired at retirement would change winners on some
// replicas and not others: testdata/crdt/retire_moved_session.txt.)
func (st *originState) retired() bool { return st.node.retired(st.origin.Incarnation) }

// retire ends, in the projection, the active sessions of an origin (st)
// that has just been retired at local time now, queues them for GC and
// returns the users whose presence changed. Older incarnations were
// retired before.
func (r *Replica) retire(st *originState, now int64) []string {
	var users []string
	st.log.Ascend(func(it logItem) bool {
		if it.kind != itemSession {
			return true
		}
		rec := r.recs.at(recID(it.ref))
		if rec.state != StateActive {
			return true // a tombstone already, queued when it ended
		}
		if rec.counted {
			users = append(users, r.names.str(rec.user))
		}
		rec.endedAt = now
		r.recount(rec)
		r.tombstones = append(r.tombstones, tombstone{rec: recID(it.ref), origin: st.idx, version: rec.version, endedAt: now})
		return true
	})
	users = sortedUnique(users)
	r.noteShown(users, now)
	return users
}

// ended reports whether a record has ended in this replica's view: terminal,
// or written by a retired incarnation. Ended records are GC'd after the
// tombstone horizon.
func (r *Replica) ended(rec *record) bool {
	return rec.state.Terminal() || r.originList[rec.origin].retired()
}

// dropSessions removes every session record of an origin, raising its GC
// floor so lagging peers get a full snapshot, and returns the users whose
// presence may have changed.
func (r *Replica) dropSessions(st *originState, now int64) []string {
	var victims []recID
	st.log.Ascend(func(it logItem) bool {
		if it.kind == itemSession {
			victims = append(victims, recID(it.ref))
		}
		return true
	})
	users := make([]string, 0, len(victims))
	for _, id := range victims {
		rec := r.recs.at(id)
		if rec.counted {
			users = append(users, r.names.str(rec.user))
		}
		st.gcFloor = max(st.gcFloor, rec.version)
		r.raiseFloor(r.keyOf(rec), rec.epoch, now)
		r.removeRecord(id)
	}
	return users
}

// chainScanMax is how many records of a user's chain findKey walks
// before it asks the key table instead.
const chainScanMax = 8

// find returns the record of a key, or 0.
func (r *Replica) find(k Key) recID {
	id, _, _ := r.findKey(k.User, k.Device)
	return id
}

// findKey returns the record of key (user, device), or 0, with the IDs of
// the user and device names when held (0 when not; device may be 0 when
// the record is not held although the name is).
//
// Most users hold a few sessions, and the user's name heads the chain of
// its records: walking it compares each record's device in place, where
// the key table needs the device name's lookup and then its own slot, a
// chain of cold loads on a replica the cache has not seen lately (the
// simulator merges each delta at thousands of replicas in turn). A longer
// chain, which a user with many devices makes, is left to the key table.
func (r *Replica) findKey(user, device string) (id recID, userID, deviceID nameID) {
	userID = r.names.lookup(user)
	if userID == 0 {
		return 0, 0, 0
	}
	id = r.names.recs[userID].head
	for range chainScanMax {
		if id == 0 {
			return 0, userID, 0 // the whole chain: not held
		}
		rec := r.recs.at(id)
		if r.names.equal(rec.device, device) {
			return id, userID, rec.device
		}
		id = rec.next
	}
	if id == 0 {
		return 0, userID, 0
	}
	if deviceID = r.names.lookup(device); deviceID == 0 {
		return 0, userID, 0
	}
	return r.keys.find(&r.recs, userID, deviceID), userID, deviceID
}

// keyOf returns a record's key as new strings.
func (r *Replica) keyOf(rec *record) Key {
	return Key{User: r.names.str(rec.user), Device: r.names.str(rec.device)}
}

// compareHeld is CompareSessions of a held record and s, for the same key.
func (r *Replica) compareHeld(rec *record, s *Session) int {
	if rec.epoch != s.Epoch {
		return cmpU64(rec.epoch, s.Epoch)
	}
	if at, bt := rec.state.Terminal(), s.State.Terminal(); at != bt {
		if at {
			return 1
		}
		return -1
	}
	if rec.seq != s.Seq {
		return cmpU64(rec.seq, s.Seq)
	}
	o := r.originList[rec.origin].origin
	if c := strings.Compare(o.Node, s.Gateway); c != 0 { // the record's gateway is its origin's node
		return c
	}
	if c := r.names.compare(rec.id, s.ID); c != 0 {
		return c
	}
	if o != s.Origin {
		if o.less(s.Origin) {
			return -1
		}
		return 1
	}
	return cmpU64(rec.version, s.Version)
}

// mergeSession keeps the greater of the held record and s, copying what it
// keeps of s. It reports whether s was taken. st is the state of s.Origin
// (callers have it).
func (r *Replica) mergeSession(st *originState, s *Session, now int64) bool {
	id, user, device := r.findKey(s.User, s.Device)
	var cur *record
	if id != 0 {
		cur = r.recs.at(id)
		if r.compareHeld(cur, s) >= 0 {
			return false
		}
	}
	if st.versionTaken(s.Version, itemSession, uint32(id)) {
		return false
	}
	ended := s.State.Terminal() || st.retired()
	var endedAt int64
	if ended {
		endedAt = now
		// Keep the age of a tombstone only when the new record ends the same
		// epoch. The end of a newer epoch starts a new horizon: inheriting
		// the older end's age would collect it early, and a delayed active
		// write of the newer epoch would then revive the session
		// (testdata/crdt/tombstone_epochs.txt).
		if cur != nil && r.ended(cur) && cur.epoch == s.Epoch {
			endedAt = cur.endedAt
		}
	}
	var groups setID
	if cur != nil && slices.Equal(r.sets.groups(cur.groups), s.Groups) {
		groups = cur.groups // a later write of one session mostly keeps its groups
		r.sets.retain(groups)
	} else {
		groups = r.sets.intern(&r.names, s.Groups)
	}
	var rec *record
	if cur == nil {
		id = r.recs.alloc()
		rec = r.recs.at(id)
		rec.user, rec.device = r.names.take(user, s.User), r.names.take(device, s.Device)
		r.keys.insert(&r.recs, id)
		r.chainUser(id, rec)
	} else {
		// The new record takes the old one's slot, which the key index
		// and the user's chain already hold: only the origin log and, when
		// the groups differ, the group counts change (recount below brings
		// the counts in line, as for a new record).
		rec = cur
		r.tally(rec, -1)
		r.originList[rec.origin].log.Delete(logItem{version: rec.version})
		if rec.counted && rec.groups != groups {
			r.uncount(rec)
		}
		r.sets.release(&r.names, rec.groups)
		r.releaseExtras(rec)
		if !r.names.equal(rec.id, s.ID) { // a later write of one session keeps its ID
			r.names.release(rec.id)
			rec.id = 0
		}
	}
	if rec.id == 0 {
		rec.id = r.names.store(s.ID)
	}
	r.setExtras(rec, s.Meta, s.Info)
	rec.groups = groups
	rec.epoch, rec.seq, rec.version = s.Epoch, s.Seq, s.Version
	rec.expiresAt, rec.updated, rec.endedAt = s.ExpiresAt, s.Updated, endedAt
	rec.origin = st.idx
	rec.state, rec.status = s.State, s.Status
	r.tally(rec, 1)
	st.log.ReplaceOrInsert(logItem{version: s.Version, ref: uint32(id), kind: itemSession})
	r.recount(rec)
	if ended {
		r.tombstones = append(r.tombstones, tombstone{rec: id, origin: st.idx, version: s.Version, endedAt: endedAt})
		r.capUserTombstones(id, now)
	}
	return true
}

// chainUser adds a new record to its user's chain.
func (r *Replica) chainUser(id recID, rec *record) {
	head := &r.names.recs[rec.user].head
	rec.prev, rec.next = 0, *head
	if *head != 0 {
		r.recs.at(*head).prev = id
	} else {
		r.users++
	}
	*head = id
}

// unchainUser removes a record from its user's chain.
func (r *Replica) unchainUser(rec *record) {
	if rec.prev != 0 {
		r.recs.at(rec.prev).next = rec.next
	} else if r.names.recs[rec.user].head = rec.next; rec.next == 0 {
		r.users--
	}
	if rec.next != 0 {
		r.recs.at(rec.next).prev = rec.prev
	}
}

// userRecords returns a user's records, sorted by device.
func (r *Replica) userRecords(user string) []recID {
	u := r.names.lookup(user)
	if u == 0 {
		return nil
	}
	var ids []recID
	for id := r.names.recs[u].head; id != 0; id = r.recs.at(id).next {
		ids = append(ids, id)
	}
	if len(ids) > 1 {
		slices.SortFunc(ids, func(a, b recID) int {
			return bytes.Compare(r.names.bytes(r.recs.at(a).device), r.names.bytes(r.recs.at(b).device))
		})
	}
	return ids
}

// versionTaken reports whether the origin's log already names another
// record at version v. An honest origin never writes two records with one
// version; a corrupt or hostile peer could, and taking both would leave the
// log naming only one of them. The first one held stays. kind and ref name
// the record the replica holds for the new record's slot (ref 0 when it
// holds none): the log names another record at v if it names anything but
// that one.
func (st *originState) versionTaken(v uint64, kind itemKind, ref uint32) bool {
	it, ok := st.log.Get(v)
	return ok && (ref == 0 || it.kind != kind || it.ref != ref)
}

// removeRecord deletes a session record and all index references to it.
func (r *Replica) removeRecord(id recID) {
	rec := r.recs.at(id)
	r.tally(rec, -1)
	if rec.counted {
		r.uncount(rec)
	}
	r.originList[rec.origin].log.Delete(logItem{version: rec.version})
	r.keys.remove(&r.recs, id)
	r.unchainUser(rec)
	r.sets.release(&r.names, rec.groups)
	r.releaseExtras(rec)
	r.names.release(rec.id)
	r.names.release(rec.device)
	r.names.release(rec.user)
	r.recs.release(id)
}

func (r *Replica) account(user string) *Account {
	if slot, ok := r.accounts[user]; ok {
		return r.acctSlots[slot]
	}
	return nil
}

func (r *Replica) mergeAccount(a *Account) bool {
	slot, held := r.accounts[a.User]
	var cur *Account
	if held {
		cur = r.acctSlots[slot]
		if CompareAccounts(cur, a) >= 0 {
			return false
		}
	}
	st := r.origin(a.Origin)
	if st != nil && st.versionTaken(a.Version, itemAccount, slot) {
		return false
	}
	if st == nil {
		st = r.originState(a.Origin)
	}
	if held {
		if cst := r.origin(cur.Origin); cst != nil {
			cst.log.Delete(logItem{version: cur.Version})
		}
	} else {
		slot = r.allocAccount()
		r.accounts[a.User] = slot
	}
	c := *a
	r.acctSlots[slot] = &c
	if c.Override == OverrideInvisible {
		r.invisible[c.User] = struct{}{}
	} else {
		delete(r.invisible, c.User)
	}
	st.log.ReplaceOrInsert(logItem{version: a.Version, ref: slot, kind: itemAccount})
	return true
}

func (r *Replica) allocAccount() uint32 {
	if n := len(r.acctFree); n > 0 {
		slot := r.acctFree[n-1]
		r.acctFree = r.acctFree[:n-1]
		return slot
	}
	r.acctSlots = append(r.acctSlots, nil)
	return uint32(len(r.acctSlots) - 1)
}

// removeAccount deletes a user's account record, whose log item the caller
// has removed.
func (r *Replica) removeAccount(user string) {
	slot := r.accounts[user]
	delete(r.accounts, user)
	delete(r.invisible, user)
	r.acctSlots[slot] = nil
	r.acctFree = append(r.acctFree, slot)
}

// effectiveActive reports whether a record counts as active in this
// replica's projection: active, written by the newest incarnation of its
// gateway that this replica knows, and its gateway not marked down (or
// this replica's own).
func (r *Replica) effectiveActive(rec *record) bool {
	if rec.state != StateActive {
		return false
	}
	st := r.originList[rec.origin]
	ns := st.node
	return !ns.retired(st.origin.Incarnation) && (!ns.down || ns.self)
}

// recount brings a record's group counts in line with its effective state.
func (r *Replica) recount(rec *record) {
	want := r.effectiveActive(rec)
	switch {
	case want && !rec.counted:
		r.tally(rec, -1)
		rec.counted = true
		r.tally(rec, 1)
		if r.groupOnline != nil {
			r.countGroups(rec)
		}
	case !want && rec.counted:
		r.tally(rec, -1)
		r.uncount(rec)
		r.tally(rec, 1)
	}
}

// countGroups adds a counted record to the group index.
func (r *Replica) countGroups(rec *record) {
	for _, g := range r.sets.ids(rec.groups) {
		users := r.groupOnline[g]
		if users == nil {
			users = make(map[nameID]int32)
			r.groupOnline[g] = users
		}
		users[rec.user]++
	}
}

// groupIndex returns the group index, building it from the counted records
// on first use.
func (r *Replica) groupIndex() map[nameID]map[nameID]int32 {
	if r.groupOnline == nil {
		r.groupOnline = make(map[nameID]map[nameID]int32)
		r.recs.each(func(_ recID, rec *record) {
			if rec.counted {
				r.countGroups(rec)
			}
		})
	}
	return r.groupOnline
}

func (r *Replica) uncount(rec *record) {
	rec.counted = false
	if r.groupOnline == nil {
		return
	}
	for _, g := range r.sets.ids(rec.groups) {
		users := r.groupOnline[g]
		if users[rec.user]--; users[rec.user] <= 0 {
			delete(users, rec.user)
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
