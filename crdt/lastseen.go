package crdt

import (
	"fmt"
	"slices"
)

// Last seen. Every user has a register of when one of the user's sessions
// last ended: each owning gateway writes, when a session it owns ends, the
// time it ended, as a record of its own origin (PutLastSeen), and replicas
// keep the greatest write (CompareLastSeen), a max-register. It is its own
// record, not a field of the account record: the account merges by
// last-writer-wins, and a time carried there from one gateway would
// overwrite a concurrent override set on another.
//
// The register outlives the session records: they are collected a
// tombstone horizon after they end, the register LastSeenRetention after
// its time (GC). A write older than that is never taken, so a replica does
// not take back what it collected; nothing it collects was still live
// elsewhere, since every write it beat is older still.
//
// A gateway that fails writes nothing. Each replica's projection shows the
// users whose sessions it shows expired because their gateway is marked
// down or was retired as seen at the time it started showing them so
// (shown; never replicated), and Presence reports the later of the two.

// LastSeen is one write of a user's last-seen register: At is when a
// session of User that Origin owned ended, by Origin's clock.
type LastSeen struct {
	User    string
	At      int64 // Unix nanoseconds; 0 and below are refused
	Origin  Origin
	Version uint64
}

// CompareLastSeen orders two writes of the same user's register: the later
// At wins, then the origin, then the version, so every replica keeps the
// same write.
func CompareLastSeen(a, b *LastSeen) int {
	if a.At != b.At {
		if a.At < b.At {
			return -1
		}
		return 1
	}
	if c := compareOrigins(a.Origin, b.Origin); c != 0 {
		return c
	}
	return cmpU64(a.Version, b.Version)
}

// MergeLastSeen returns the greater of two writes of a user's register.
// It is commutative, associative and idempotent.
func MergeLastSeen(a, b LastSeen) LastSeen {
	if CompareLastSeen(&a, &b) >= 0 {
		return a
	}
	return b
}

func (ls *LastSeen) validate() error {
	if err := checkNames("last seen", ls.User, ls.Origin.Node); err != nil {
		return err
	}
	if ls.Version == 0 || ls.At <= 0 {
		return fmt.Errorf("%w: last seen of %q has version %d, time %d", ErrInvalidDelta, ls.User, ls.Version, ls.At)
	}
	return nil
}

// lastSeenRec is a replica's register of one user, with its local
// projection: 32 bytes without a Go pointer.
type lastSeenRec struct {
	// at, version and origin (an index in Replica.originList) are the held
	// write; version 0 when none is.
	at      int64
	version uint64
	origin  uint32
	user    nameID // interned: one reference held by the slot
	// shown is when this replica started showing a session of the user
	// expired because its gateway was marked down or retired (0: never);
	// local, never replicated.
	shown int64
}

// lastSeenTable holds the registers: a slot per user with a held write or
// a shown time, found by the user's name ID.
type lastSeenTable struct {
	byUser map[nameID]uint32
	slots  []lastSeenRec // slot 0 unused
	free   []uint32
	sweep  int // the next slot GC looks at
}

// lastSeenSweep is how many slots one GC pass looks at: retention is long
// (days), so a sweep that takes many passes to go round costs little
// precision and keeps every pass cheap however many users there are.
const lastSeenSweep = 4096

// slot returns the slot of a user, creating it when create is set; 0 when
// there is none.
func (r *Replica) lastSeenSlot(user string, create bool) uint32 {
	t := &r.lastSeen
	if u := r.names.lookup(user); u != 0 {
		if slot, ok := t.byUser[u]; ok {
			return slot
		}
	}
	if !create {
		return 0
	}
	var slot uint32
	if n := len(t.free); n > 0 {
		slot = t.free[n-1]
		t.free = t.free[:n-1]
	} else {
		if len(t.slots) == 0 {
			t.slots = make([]lastSeenRec, 1)
		}
		t.slots = append(t.slots, lastSeenRec{})
		slot = uint32(len(t.slots) - 1)
	}
	u := r.names.intern(user)
	t.slots[slot] = lastSeenRec{user: u}
	if t.byUser == nil {
		t.byUser = make(map[nameID]uint32)
	}
	t.byUser[u] = slot
	return slot
}

// releaseLastSeenSlot frees a slot that holds neither a write nor a shown
// time.
func (r *Replica) releaseLastSeenSlot(slot uint32) {
	t := &r.lastSeen
	rec := &t.slots[slot]
	if rec.version != 0 || rec.shown != 0 {
		return
	}
	delete(t.byUser, rec.user)
	r.names.release(rec.user)
	*rec = lastSeenRec{}
	t.free = append(t.free, slot)
	if len(t.byUser) == 0 {
		*t = lastSeenTable{}
	}
}

// lastSeenExpired reports whether a register time is past retention at now.
func (r *Replica) lastSeenExpired(at, now int64) bool {
	return at <= 0 || now-at >= int64(r.cfg.LastSeenRetention)
}

// lastSeenWrite builds the LastSeen of a slot's held write.
func (r *Replica) lastSeenWrite(slot uint32) LastSeen {
	rec := &r.lastSeen.slots[slot]
	return LastSeen{User: r.names.str(rec.user), At: rec.at, Origin: r.originList[rec.origin].origin, Version: rec.version}
}

// compareHeldLastSeen is CompareLastSeen of a slot's held write and ls.
func (r *Replica) compareHeldLastSeen(rec *lastSeenRec, ls *LastSeen) int {
	if rec.at != ls.At {
		if rec.at < ls.At {
			return -1
		}
		return 1
	}
	if c := compareOrigins(r.originList[rec.origin].origin, ls.Origin); c != 0 {
		return c
	}
	return cmpU64(rec.version, ls.Version)
}

// mergeLastSeen keeps the greater of the held write of ls's user and ls,
// unless ls is past retention at now. It reports whether ls was taken.
func (r *Replica) mergeLastSeen(ls *LastSeen, now int64) bool {
	if r.lastSeenExpired(ls.At, now) {
		return false
	}
	slot := r.lastSeenSlot(ls.User, false)
	if slot != 0 {
		if rec := &r.lastSeen.slots[slot]; rec.version != 0 && r.compareHeldLastSeen(rec, ls) >= 0 {
			return false
		}
	}
	st := r.origin(ls.Origin)
	if st != nil && st.versionTaken(ls.Version, itemLastSeen, slot) {
		return false
	}
	if st == nil {
		st = r.originState(ls.Origin)
	}
	if slot == 0 {
		slot = r.lastSeenSlot(ls.User, true)
	}
	rec := &r.lastSeen.slots[slot]
	if rec.version != 0 {
		r.originList[rec.origin].log.Delete(logItem{version: rec.version})
	}
	rec.at, rec.version, rec.origin = ls.At, ls.Version, st.idx
	st.log.ReplaceOrInsert(logItem{version: ls.Version, ref: slot, kind: itemLastSeen})
	return true
}

// removeLastSeen drops a slot's held write, whose log item the caller has
// removed, and the slot if it holds nothing else.
func (r *Replica) removeLastSeen(slot uint32) {
	rec := &r.lastSeen.slots[slot]
	rec.at, rec.version, rec.origin = 0, 0, 0
	r.releaseLastSeenSlot(slot)
}

// noteShown records, for users whose sessions this replica has just
// started showing expired without a write (their gateway marked down or
// retired), the time now as their shown time.
func (r *Replica) noteShown(users []string, now int64) {
	if now <= 0 {
		return
	}
	for _, u := range users {
		rec := &r.lastSeen.slots[r.lastSeenSlot(u, true)]
		rec.shown = max(rec.shown, now)
	}
}

// PutLastSeen writes, as this replica's origin, that a session of user it
// owned ended at now (Unix nanoseconds), and returns the delta to
// disseminate. A time earlier than the register's (a clock stepped back,
// or a peer's clock ahead) is raised to it: a write never loses to one
// held, so a later write of an origin dominates its earlier ones and
// Coalesce may keep the last alone.
func (r *Replica) PutLastSeen(user string, now int64) (Delta, error) {
	at := now
	if slot := r.lastSeenSlot(user, false); slot != 0 && r.lastSeen.slots[slot].version != 0 {
		at = max(at, r.lastSeen.slots[slot].at)
	}
	ls := LastSeen{User: user, At: at, Origin: r.cfg.Self, Version: r.version + 1}
	if err := ls.validate(); err != nil {
		return Delta{}, fmt.Errorf("crdt: local last seen: %w", err)
	}
	r.version++
	r.origin(r.cfg.Self).watermark = r.version
	r.mergeLastSeen(&ls, now)
	out := ls
	return Delta{Since: ls.Version - 1, LastSeen: &out}, nil
}

// LastSeen returns the user's last-seen time at now (Unix nanoseconds): the
// later of the register's write and the time this replica started showing
// a session of the user expired for its gateway's failure, unless past
// retention; 0 for none. It is the time whether or not the user is online
// now; Presence reports it only while offline.
func (r *Replica) LastSeen(user string, now int64) int64 {
	slot := r.lastSeenSlot(user, false)
	if slot == 0 {
		return 0
	}
	rec := &r.lastSeen.slots[slot]
	var at int64
	if rec.version != 0 && !r.lastSeenExpired(rec.at, now) {
		at = rec.at
	}
	if !r.lastSeenExpired(rec.shown, now) {
		at = max(at, rec.shown)
	}
	return at
}

// LastSeenRegisters returns how many users this replica holds a last-seen
// register or shown time for.
func (r *Replica) LastSeenRegisters() int { return len(r.lastSeen.byUser) }

// collectLastSeen looks at the next lastSeenSweep slots and collects the
// writes and shown times past retention at now. It returns how many
// registers it emptied.
func (r *Replica) collectLastSeen(now int64) int {
	t := &r.lastSeen
	if len(t.byUser) == 0 {
		return 0
	}
	n := 0
	for range min(lastSeenSweep, len(t.slots)) {
		if t.sweep <= 0 || t.sweep >= len(t.slots) {
			t.sweep = 1
		}
		slot := uint32(t.sweep)
		t.sweep++
		rec := &t.slots[slot]
		if rec.user == 0 {
			continue // free
		}
		if rec.shown != 0 && r.lastSeenExpired(rec.shown, now) {
			rec.shown = 0
		}
		if rec.version != 0 && r.lastSeenExpired(rec.at, now) {
			// No GC floor: what the write beat is older and past
			// retention too, so no peer holds anything live that only
			// it superseded.
			r.originList[rec.origin].log.Delete(logItem{version: rec.version})
			rec.at, rec.version, rec.origin = 0, 0, 0
		}
		if rec.version == 0 && rec.shown == 0 {
			r.releaseLastSeenSlot(slot)
			n++
			if len(t.byUser) == 0 {
				break
			}
		}
	}
	return n
}

// LastSeenSnapshot returns every held register write, sorted by user.
func (r *Replica) LastSeenSnapshot() []LastSeen {
	out := make([]LastSeen, 0, len(r.lastSeen.byUser))
	for slot := range r.lastSeen.slots {
		if rec := &r.lastSeen.slots[slot]; rec.version != 0 {
			out = append(out, r.lastSeenWrite(uint32(slot)))
		}
	}
	slices.SortFunc(out, func(a, b LastSeen) int { return compareStrings(a.User, b.User) })
	return out
}
