package crdt

import (
	"bytes"
	"maps"
	"slices"
)

// session builds the Session of a held record, as held (not projected).
// user and device are its names when the caller has them as strings ("" to
// build them); Groups is the record's group set's, shared: records are
// immutable (see Delta), so callers must not modify it.
func (r *Replica) session(rec *record, user, device string) Session {
	if user == "" {
		user = r.names.str(rec.user)
	}
	if device == "" {
		device = r.names.str(rec.device)
	}
	o := r.originList[rec.origin].origin
	ex := r.extrasOf(rec)
	return Session{
		User: user, Device: device, ID: r.names.str(rec.id),
		Epoch: rec.epoch, Seq: rec.seq, Gateway: o.Node,
		State: rec.state, Status: rec.status, Groups: r.sets.groups(rec.groups),
		ExpiresAt: rec.expiresAt, Updated: rec.updated,
		Origin: o, Version: rec.version,
		Meta: r.names.str(ex.meta), Info: r.names.str(ex.info),
	}
}

// view returns a record as this replica's projection shows it: an active
// session of a gateway marked down, or of a retired incarnation, is shown
// expired. user and device are as for session.
func (r *Replica) view(rec *record, user, device string) Session {
	s := r.session(rec, user, device)
	// rec.counted is effectiveActive(rec), kept by every merge and node
	// change (CheckInvariants verifies it): no node lookup needed.
	if s.State == StateActive && !rec.counted {
		s.State = StateExpired
	}
	return s
}

// Session returns the projected record for a key, tombstones included. Its
// Groups slice is shared with the replica: read it, do not modify it.
func (r *Replica) Session(k Key) (Session, bool) {
	id := r.find(k)
	if id == 0 {
		return Session{}, false
	}
	return r.view(r.recs.at(id), k.User, k.Device), true
}

// MaxEpoch returns the highest epoch this replica holds for a key, ended
// records included, or 0.
func (r *Replica) MaxEpoch(k Key) uint64 {
	floor := r.epochFloorOf(k)
	if id := r.find(k); id != 0 {
		return max(r.recs.at(id).epoch, floor)
	}
	return floor
}

// UserSessions returns the projected records of a user, sorted by device.
// Their Groups slices are shared with the replica: read them, do not modify
// them.
func (r *Replica) UserSessions(user string) []Session {
	ids := r.userRecords(user)
	out := make([]Session, 0, len(ids))
	for _, id := range ids {
		out = append(out, r.view(r.recs.at(id), user, ""))
	}
	return out
}

// ActiveSessionCount returns how many of a user's sessions the projection
// shows active (those of a gateway marked down do not count), without
// allocating: O(the user's records).
func (r *Replica) ActiveSessionCount(user string) int {
	u := r.names.lookup(user)
	if u == 0 {
		return 0
	}
	count := 0
	for id := r.names.recs[u].head; id != 0; {
		rec := r.recs.at(id)
		if rec.counted {
			count++
		}
		id = rec.next
	}
	return count
}

// Account returns a user's account record.
func (r *Replica) Account(user string) (Account, bool) {
	a := r.account(user)
	if a == nil {
		return Account{}, false
	}
	return *a, true
}

// Presence aggregates a user's projected sessions and account record at
// now (Unix nanoseconds: an account's Until lapses by it), with the
// user's last seen while offline. It
// sorts only the active sessions: a user's tombstones cost a walk, not a
// sort (and are bounded by MaxTombstonesPerUser).
func (r *Replica) Presence(user string, now int64) Presence {
	u := r.names.lookup(user)
	var ids []recID
	if u != 0 {
		for id := r.names.recs[u].head; id != 0; id = r.recs.at(id).next {
			if r.recs.at(id).counted {
				ids = append(ids, id)
			}
		}
	}
	if len(ids) > 1 {
		slices.SortFunc(ids, func(a, b recID) int {
			return bytes.Compare(r.names.bytes(r.recs.at(a).device), r.names.bytes(r.recs.at(b).device))
		})
	}
	recs := make([]*Session, 0, len(ids))
	for _, id := range ids {
		s := r.session(r.recs.at(id), user, "")
		recs = append(recs, &s)
	}
	p := Aggregate(user, recs, r.account(user), now)
	switch {
	case !p.Online:
		p.LastSeen = r.LastSeen(user, now)
	case p.Invisible:
		p.hiddenLastSeen = r.LastSeen(user, now)
	}
	return p
}

// GroupOnlineCount returns how many users have an active session in group
// g: O(1), but for the first group query of a replica, which builds the
// group index from its records.
func (r *Replica) GroupOnlineCount(g string) int {
	idx := r.groupIndex()
	if id := r.names.lookup(g); id != 0 {
		return len(idx[id])
	}
	return 0
}

// GroupOnlineUsers returns the users with an active session in group g,
// sorted.
func (r *Replica) GroupOnlineUsers(g string) []string {
	idx := r.groupIndex()
	id := r.names.lookup(g)
	if id == 0 {
		return nil
	}
	users := make([]string, 0, len(idx[id]))
	for u := range idx[id] {
		users = append(users, r.names.str(u))
	}
	slices.Sort(users)
	return users
}

// NodeSessions returns the keys of the session records whose gateway is
// node (every incarnation), sorted.
func (r *Replica) NodeSessions(node string) []Key {
	var keys []Key
	for _, st := range r.nodeOrigins(node) {
		st.log.Ascend(func(it logItem) bool {
			if it.kind == itemSession {
				keys = append(keys, r.keyOf(r.recs.at(recID(it.ref))))
			}
			return true
		})
	}
	slices.SortFunc(keys, func(a, b Key) int {
		if a.User != b.User {
			return compareStrings(a.User, b.User)
		}
		return compareStrings(a.Device, b.Device)
	})
	return keys
}

// Stats counts what a replica holds. The JSON names are those of the
// gateway's GET /v1/stats.
type Stats struct {
	Sessions   int `json:"sessions"` // records, tombstones included
	Active     int `json:"active"`   // effectively active sessions
	Tombstones int `json:"tombstones"`
	Accounts   int `json:"accounts"`
	Origins    int `json:"origins"`
	Users      int `json:"users"`
	Groups     int `json:"groups"` // groups with at least one online user
}

// Stats returns counts of what the replica holds. It walks the sessions:
// O(records), for metrics, not for hot paths.
func (r *Replica) Stats() Stats {
	st := Stats{Sessions: r.keys.n, Accounts: len(r.accounts), Origins: len(r.originList),
		Users: r.users, Groups: len(r.groupIndex())}
	r.recs.each(func(_ recID, rec *record) {
		if rec.counted {
			st.Active++
		}
		if r.ended(rec) {
			st.Tombstones++
		}
	})
	return st
}

// Snapshot returns every record, sorted by key (sessions) and user
// (accounts), as held (not projected). Replicas that have converged return
// equal snapshots. Session Groups slices are shared with the replica.
func (r *Replica) Snapshot() ([]Session, []Account) {
	ss := make([]Session, 0, r.keys.n)
	r.recs.each(func(_ recID, rec *record) { ss = append(ss, r.session(rec, "", "")) })
	slices.SortFunc(ss, func(a, b Session) int {
		if a.User != b.User {
			return compareStrings(a.User, b.User)
		}
		return compareStrings(a.Device, b.Device)
	})
	as := make([]Account, 0, len(r.accounts))
	for _, u := range slices.Sorted(maps.Keys(r.accounts)) {
		as = append(as, *r.account(u))
	}
	return ss, as
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
