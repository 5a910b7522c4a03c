package webhook

import (
	"slices"
	"time"
)

// Notifier returns the gateway that announces user's changes among
// members (the live gateways, as one gateway sees them): the member with
// the highest rendezvous score, hash(member, user). Every gateway computes
// it alike, so with the same view exactly one gateway sends; and when a
// member leaves only its own users move (each to the member that scored
// next), when one joins only the users it now wins move to it. "" when
// members is empty.
//
// The score is part of what gateways agree on: every gateway of a cluster
// must compute it the same way.
func Notifier(user string, members []string) string {
	best, bestScore := "", uint64(0)
	for _, m := range members {
		if s := score(m, user); best == "" || s > bestScore || (s == bestScore && m < best) {
			best, bestScore = m, s
		}
	}
	return best
}

// score is 64-bit FNV-1a over member, a zero byte and user, finished by
// splitmix64's mixer (FNV alone mixes the last bytes poorly).
func score(member, user string) uint64 {
	const offset, prime = 14695981039346656037, 1099511628211
	h := uint64(offset)
	for i := 0; i < len(member); i++ {
		h = (h ^ uint64(member[i])) * prime
	}
	h *= prime // the zero byte
	for i := 0; i < len(user); i++ {
		h = (h ^ uint64(user[i])) * prime
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}

// maxRecentViews bounds the earlier views a Handoff keeps within its
// window: under a burst of membership changes the oldest are dropped.
const maxRecentViews = 8

// Handoff is a gateway's view of which gateways announce which users, as
// its membership view changes. A gateway announces a user when it is the
// user's Notifier under its current view, or under a view it held within
// the last Window: while the members' views of a change disagree (one has
// seen a member join, leave or fail, another not yet), the gateways on
// both sides of it announce the users that move, and the receiver
// deduplicates by webhook-id; nobody announces them too few times.
// Not safe for concurrent use.
type Handoff struct {
	// Self is this gateway's name.
	Self string
	// Window is how long an earlier view still counts.
	Window time.Duration

	cur    []string // sorted; nil before the first Observe
	recent []view   // earlier views, oldest first
}

type view struct {
	members []string
	until   int64 // Unix nanoseconds: the view stops counting
}

// Observe takes the live members (self among them or not: it is added) at
// now, and returns the members that left the view since the last call.
func (h *Handoff) Observe(members []string, now int64) (removed []string) {
	m := append(slices.Clone(members), h.Self)
	slices.Sort(m)
	m = slices.Compact(m)
	h.expire(now)
	if h.cur == nil {
		h.cur = m
		return nil
	}
	if slices.Equal(m, h.cur) {
		return nil
	}
	for _, old := range h.cur {
		if _, ok := slices.BinarySearch(m, old); !ok {
			removed = append(removed, old)
		}
	}
	h.recent = append(h.recent, view{members: h.cur, until: now + int64(h.Window)})
	if len(h.recent) > maxRecentViews {
		h.recent = h.recent[len(h.recent)-maxRecentViews:]
	}
	h.cur = m
	return removed
}

func (h *Handoff) expire(now int64) {
	h.recent = slices.DeleteFunc(h.recent, func(v view) bool { return v.until <= now })
}

// Members returns the current view, sorted (nil before the first Observe).
func (h *Handoff) Members() []string { return h.cur }

// Notifier returns user's notifier under the current view.
func (h *Handoff) Notifier(user string) string {
	if h.cur == nil {
		return h.Self
	}
	return Notifier(user, h.cur)
}

// Responsible reports whether this gateway announces user's changes at
// now: it is the user's notifier under the current view or under one it
// held within the window.
func (h *Handoff) Responsible(user string, now int64) bool {
	if h.Notifier(user) == h.Self {
		return true
	}
	for _, v := range h.recent {
		if v.until > now && Notifier(user, v.members) == h.Self {
			return true
		}
	}
	return false
}

// Settled reports whether no earlier view counts at now: each user has one
// notifier in this gateway's view.
func (h *Handoff) Settled(now int64) bool {
	h.expire(now)
	return len(h.recent) == 0
}

// Shadow keeps, for a window, the events this gateway decided but left to
// another gateway to send. When that gateway leaves the view (it failed,
// or left) within the window, the events it may not have sent are sent
// again by their new notifier, with their ids: a receiver that got them
// already drops them as duplicates. A ring of bounded size; an event
// pushed out early is counted. Not safe for concurrent use.
type Shadow struct {
	ring        []shadowed
	next, held  int
	Overwritten uint64 // events pushed out of the ring within their window
	window      int64
}

type shadowed struct {
	ev       *Event
	notifier string
	at       int64
}

// NewShadow returns a shadow of size events kept for window.
func NewShadow(size int, window time.Duration) *Shadow {
	return &Shadow{ring: make([]shadowed, max(size, 0)), window: int64(window)}
}

// Add keeps ev, which notifier is to send, decided at now.
func (s *Shadow) Add(ev *Event, notifier string, now int64) {
	if len(s.ring) == 0 {
		return
	}
	if s.held == len(s.ring) {
		if old := s.ring[s.next]; old.ev != nil && old.at+s.window > now {
			s.Overwritten++
		}
	} else {
		s.held++
	}
	s.ring[s.next] = shadowed{ev: ev, notifier: notifier, at: now}
	s.next = (s.next + 1) % len(s.ring)
}

// Take removes and returns, oldest first, the events kept within the
// window before now whose notifier is one of gone and for which
// mine reports this gateway the new notifier.
func (s *Shadow) Take(gone []string, now int64, mine func(user string) bool) []*Event {
	if len(gone) == 0 || s.held == 0 {
		return nil
	}
	var out []*Event
	start := (s.next - s.held + len(s.ring)) % len(s.ring)
	for i := range s.held {
		e := &s.ring[(start+i)%len(s.ring)]
		if e.ev == nil || e.at+s.window <= now || !slices.Contains(gone, e.notifier) || !mine(e.ev.User) {
			continue
		}
		out = append(out, e.ev)
		e.ev = nil
	}
	return out
}

// Len returns the events held (some may be past the window or taken).
func (s *Shadow) Len() int { return s.held }
