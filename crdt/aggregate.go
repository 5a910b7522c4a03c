package crdt

import (
	"cmp"
	"slices"
)

// Contributor is one active session that an aggregate was computed from.
type Contributor struct {
	Session string
	Device  string
	Epoch   uint64
	Gateway string
	Status  Status
	// Meta and Info are the session's meta and its token's info (compact
	// JSON objects; empty for none).
	Meta string
	Info string
}

// Presence is the aggregate presence of one user.
type Presence struct {
	User   string
	Online bool
	Status UserStatus
	// Sessions are the active sessions the status came from, sorted by
	// device, so any status can be explained.
	Sessions []Contributor
	// Text, Emoji and Until are the account's, unless lapsed (empty and 0
	// then, as for none), whether or not the user is online.
	Text  string
	Emoji string
	Until int64
	// LastSeen, while offline, is when the user's last session ended
	// (Unix nanoseconds; Replica.LastSeen); 0 for none or while online.
	// Aggregate leaves it 0: the register is not among its inputs.
	LastSeen int64
	// Invisible is true when the account's override is invisible (and not
	// lapsed), whether or not the user is online: Status and Sessions are
	// the truth the user sees, and every other reader but a backend sees
	// Public instead.
	Invisible bool
	// hiddenLastSeen is the user's last seen while invisible and online
	// (Replica.Presence sets it): what Public shows, as for an offline user.
	hiddenLastSeen int64
}

// Public returns the presence as readers other than the user see it: p
// itself unless Invisible. An invisible user shows as an offline one does:
// no sessions, status offline, the account's text, emoji and until and
// the last seen (an offline user's presence carries them too), so going
// invisible looks like going offline and leaving it like coming online.
func (p Presence) Public() Presence {
	if !p.Invisible {
		return p
	}
	seen := p.LastSeen
	if p.Online {
		seen = p.hiddenLastSeen
	}
	return Presence{User: p.User, Status: UserOffline, Text: p.Text, Emoji: p.Emoji, Until: p.Until, LastSeen: seen}
}

// Aggregate computes a user's presence at now (Unix nanoseconds) from the
// user's session records and account record (nil for none). An account
// whose Until has passed at now counts as one without override, text and
// emoji (Account.Effective). It is a pure function; records that are not
// active (including those whose owner the caller treats as failed, passed
// with State set to StateExpired) do not contribute.
//
// Precedence, first match wins:
//  1. offline if no session is active;
//  2. the account override (away, dnd or busy; invisible sets
//     Presence.Invisible and leaves the status to the rules below);
//  3. the status of the authoritative device, when it has an active session;
//  4. away if every active session is away; otherwise available (busy from
//     a device that is not authoritative counts as available).
func Aggregate(user string, sessions []*Session, acct *Account, now int64) Presence {
	p := Presence{User: user}
	if acct != nil && acct.Lapsed(now) {
		eff := acct.Effective(now)
		acct = &eff
	}
	if acct != nil {
		p.Text, p.Emoji, p.Until = acct.Text, acct.Emoji, acct.Until
		p.Invisible = acct.Override == OverrideInvisible
	}
	for _, s := range sessions {
		if s.State != StateActive {
			continue
		}
		p.Sessions = append(p.Sessions, Contributor{
			Session: s.ID, Device: s.Device, Epoch: s.Epoch, Gateway: s.Gateway, Status: s.Status,
			Meta: s.Meta, Info: s.Info,
		})
	}
	if len(p.Sessions) == 0 {
		p.Status = UserOffline
		return p
	}
	slices.SortFunc(p.Sessions, func(a, b Contributor) int {
		return cmp.Or(cmp.Compare(a.Device, b.Device), cmp.Compare(a.Epoch, b.Epoch), cmp.Compare(a.Session, b.Session))
	})
	p.Online = true
	if acct != nil {
		switch acct.Override {
		case OverrideAway:
			p.Status = UserAway
			return p
		case OverrideDND:
			p.Status = UserDND
			return p
		case OverrideBusy:
			p.Status = UserBusy
			return p
		}
		if acct.AuthoritativeDevice != "" {
			// Several active records for one device are impossible in a
			// replica (one per Key), but an input list might hold them: the
			// highest epoch, last in sort order, speaks for the device.
			found := false
			var st Status
			for _, c := range p.Sessions {
				if c.Device == acct.AuthoritativeDevice {
					found, st = true, c.Status
				}
			}
			if found {
				p.Status = deviceToUser(st)
				return p
			}
		}
	}
	p.Status = UserAway
	for _, c := range p.Sessions {
		if c.Status != StatusAway {
			p.Status = UserAvailable
			break
		}
	}
	return p
}

func deviceToUser(s Status) UserStatus {
	switch s {
	case StatusAway:
		return UserAway
	case StatusBusy:
		return UserBusy
	}
	return UserAvailable
}

// Equal reports whether two aggregates are the same, sessions included.
func (p Presence) Equal(q Presence) bool {
	return p.User == q.User && p.Online == q.Online && p.Status == q.Status &&
		p.Text == q.Text && p.Emoji == q.Emoji && p.Until == q.Until && p.LastSeen == q.LastSeen &&
		p.Invisible == q.Invisible && p.hiddenLastSeen == q.hiddenLastSeen &&
		slices.Equal(p.Sessions, q.Sessions)
}
