package crdt

import (
	"maps"
	"slices"
)

// view returns a copy of a record as this replica's projection shows it: an
// active session of a gateway marked down, or of a retired incarnation, is
// shown expired. Its Groups is the held record's, shared: records are
// immutable (see Delta), so the copy costs no allocation, and callers must
// not modify it.
func (r *Replica) view(e *entry) Session {
	s := *e.s
	// e.counted is effectiveActive(e.s), kept by every merge and node
	// change (CheckInvariants verifies it): no node lookup needed.
	if s.State == StateActive && !e.counted {
		s.State = StateExpired
	}
	return s
}

// Session returns the projected record for a key, tombstones included. Its
// Groups slice is shared with the replica: read it, do not modify it.
func (r *Replica) Session(k Key) (Session, bool) {
	e := r.userEntry(k)
	if e == nil {
		return Session{}, false
	}
	return r.view(e), true
}

// MaxEpoch returns the highest epoch this replica holds for a key, ended
// records included, or 0.
func (r *Replica) MaxEpoch(k Key) uint64 {
	floor := r.epochFloorOf(k)
	if e := r.userEntry(k); e != nil {
		return max(e.s.Epoch, floor)
	}
	return floor
}

// UserSessions returns the projected records of a user, sorted by device.
// Their Groups slices are shared with the replica: read them, do not modify
// them.
func (r *Replica) UserSessions(user string) []Session {
	d := r.byUser.get(user)
	devs := d.sorted()
	out := make([]Session, 0, len(devs))
	for _, e := range devs {
		out = append(out, r.view(e))
	}
	return out
}

// ActiveSessionCount returns how many of a user's sessions the projection
// shows active (those of a gateway marked down do not count), without
// allocating: O(the user's records).
func (r *Replica) ActiveSessionCount(user string) int {
	d := r.byUser.ref(user)
	if d == nil {
		return 0
	}
	count := 0
	d.each(func(e *entry) {
		if e.counted {
			count++
		}
	})
	return count
}

// Account returns a user's account record.
func (r *Replica) Account(user string) (Account, bool) {
	a := r.accounts[user]
	if a == nil {
		return Account{}, false
	}
	return *a, true
}

// Presence aggregates a user's projected sessions and account record. It
// sorts only the active sessions: a user's tombstones cost a walk, not a
// sort (and are bounded by MaxTombstonesPerUser).
func (r *Replica) Presence(user string) Presence {
	var recs []*Session
	if d := r.byUser.ref(user); d != nil {
		d.each(func(e *entry) {
			if e.counted {
				recs = append(recs, e.s)
			}
		})
	}
	slices.SortFunc(recs, func(a, b *Session) int { return compareStrings(a.Device, b.Device) })
	return Aggregate(user, recs, r.accounts[user])
}

// GroupOnlineCount returns how many users have an active session in group
// g: O(1), but for the first group query of a replica, which builds the
// group index from its records.
func (r *Replica) GroupOnlineCount(g string) int { return len(r.groupIndex()[g]) }

// GroupOnlineUsers returns the users with an active session in group g,
// sorted.
func (r *Replica) GroupOnlineUsers(g string) []string {
	return slices.Sorted(maps.Keys(r.groupIndex()[g]))
}

// NodeSessions returns the keys of the session records whose gateway is
// node (every incarnation), sorted.
func (r *Replica) NodeSessions(node string) []Key {
	var keys []Key
	for _, st := range r.nodeOrigins(node) {
		st.log.Ascend(func(it logItem) bool {
			if it.e != nil {
				keys = append(keys, it.e.s.Key())
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
	st := Stats{Sessions: r.numSessions, Accounts: len(r.accounts), Origins: r.numOrigins,
		Users: r.byUser.len(), Groups: len(r.groupIndex())}
	r.entries(func(e *entry) {
		if e.counted {
			st.Active++
		}
		if r.ended(e.s) {
			st.Tombstones++
		}
	})
	return st
}

// Snapshot returns every record, sorted by key (sessions) and user
// (accounts), as held (not projected). Replicas that have converged return
// equal snapshots. Session Groups slices are shared with the replica.
func (r *Replica) Snapshot() ([]Session, []Account) {
	ss := make([]Session, 0, r.numSessions)
	r.entries(func(e *entry) { ss = append(ss, *e.s) })
	slices.SortFunc(ss, func(a, b Session) int {
		if a.User != b.User {
			return compareStrings(a.User, b.User)
		}
		return compareStrings(a.Device, b.Device)
	})
	as := make([]Account, 0, len(r.accounts))
	for _, u := range slices.Sorted(maps.Keys(r.accounts)) {
		as = append(as, *r.accounts[u])
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
