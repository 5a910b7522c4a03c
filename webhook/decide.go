package webhook

import (
	"cmp"
	"crypto/sha256"
	"encoding/base32"
	"encoding/binary"
	"slices"

	"github.com/rollcall/rollcall/crdt"
)

// SessionRef names one session epoch of a user.
type SessionRef struct {
	Device  string
	Session string
	Epoch   uint64
	Gateway string
}

// Last is what a gateway last saw of a user's presence, whether or not it
// is the user's notifier: every gateway follows every user, so the one
// that takes over a user's announcements knows what was announced. The
// zero Last is an offline user.
type Last struct {
	Online bool
	// Opened is the session that opened the current online period: the
	// ids of its user.online, user.status and user.offline derive from it,
	// so they stay the same while the user's other sessions come and go.
	Opened SessionRef
	// Revivals counts the times Opened came back online after a
	// gateway_failed (its gateway was shown down, then up again: a false
	// suspicion, a healed partition). It is part of the ids, so the
	// announcements of one period stay apart from those of the next.
	Revivals uint32
	// Sessions are the active sessions, by device.
	Sessions []SessionRef
	Status   crdt.UserStatus
	Text     string
	Emoji    string
	Until    int64
}

// Observation is one user's state in a gateway's projection.
type Observation struct {
	// Presence is the user's aggregate (crdt Replica.Presence).
	Presence crdt.Presence
	// Records are every session record of the user the replica holds,
	// as projected (crdt Replica.UserSessions): an active session of a
	// gateway shown down is expired.
	Records []crdt.Session
	// Account is the user's account record; nil for none.
	Account *crdt.Account
	// GatewayDown reports whether the projection shows a gateway's
	// sessions expired because it failed (crdt Replica.NodeDown); nil:
	// none is.
	GatewayDown func(gateway string) bool
	// Now is the deciding gateway's clock, Unix nanoseconds: the time of
	// a gateway_failed.
	Now int64
}

// Decide returns the event a user's change from last to ob makes, if any,
// and what to remember of the user now. It is a pure function: gateways
// that observe the same state decide the same event with the same id.
//
//   - offline to online: user.online;
//   - online to offline: user.offline, with the reason of the session that
//     ended last (gateway_failed when its gateway is shown down or its
//     record is gone; else the state its owner wrote: disconnected or
//     expired);
//   - online to online with another aggregate status, text, emoji or
//     until: user.status;
//   - anything else (sessions coming and going while the user stays
//     online, a status change of a device that does not decide the
//     aggregate): nothing.
//
// The id hashes the type, the user and the versions that identify the
// change: the session that opened the online period (device, id, epoch,
// and how many times it came back after a gateway_failed) for user.online
// and user.offline; for user.status also the new status,
// text, emoji and until, the account's stamp and each active session's
// epoch, write sequence and status. A flap back to an earlier status is a
// new write, so it gets a new id.
func Decide(last Last, ob Observation) (*Event, Last) {
	p := ob.Presence
	active := activeRecords(ob.Records)
	switch {
	case !p.Online && !last.Online:
		if last.Opened.Session != "" && slices.ContainsFunc(ob.Records, func(s crdt.Session) bool {
			return s.ID == last.Opened.Session && s.Epoch == last.Opened.Epoch
		}) {
			return nil, last
		}
		return nil, Last{}
	case !p.Online:
		ev, reason := offline(last, ob)
		if reason == GatewayFailed {
			return ev, Last{Opened: last.Opened, Revivals: last.Revivals}
		}
		return ev, Last{}
	}
	next := Last{Online: true, Opened: last.Opened, Revivals: last.Revivals, Sessions: refs(active),
		Status: p.Status, Text: p.Text, Emoji: p.Emoji, Until: p.Until}
	if !last.Online {
		opener := active[0]
		for _, s := range active[1:] {
			if cmp.Or(cmp.Compare(s.Updated, opener.Updated), cmp.Compare(s.Device, opener.Device)) < 0 {
				opener = s
			}
		}
		next.Opened, next.Revivals = ref(opener), 0
		if o := next.Opened; last.Opened.Session == o.Session && last.Opened.Epoch == o.Epoch && o.Session != "" {
			next.Revivals = last.Revivals + 1
		}
		at := opener.Updated
		id := eventID(UserOnline, p.User, next.Opened, next.Revivals, nil)
		return &Event{ID: id, Type: UserOnline, User: p.User, Time: at, Body: encodeBody(UserOnline, at, onlineData(p, active)),
			Gateway: opener.Gateway}, next
	}
	if p.Status == last.Status && p.Text == last.Text && p.Emoji == last.Emoji && p.Until == last.Until {
		return nil, next
	}
	var at int64
	var by string // the gateway of the latest write: the account's, else the first session's by device
	h := newHasher()
	h.str(p.Status.String()).str(p.Text).str(p.Emoji).u64(uint64(p.Until))
	if a := ob.Account; a != nil {
		h.u64(uint64(a.Stamp.Wall)).u64(uint64(a.Stamp.Logical)).str(a.Writer)
		at, by = a.Stamp.Wall, a.Writer
	}
	for _, s := range active {
		h.str(s.Device).u64(s.Epoch).u64(s.Seq).str(s.Status.String())
		if s.Updated > at || by == "" {
			by = s.Gateway
		}
		at = max(at, s.Updated)
	}
	id := eventID(UserStatus, p.User, next.Opened, next.Revivals, h.sum())
	return &Event{ID: id, Type: UserStatus, User: p.User, Time: at, Body: encodeBody(UserStatus, at, onlineData(p, active)),
		Gateway: by}, next
}

// offline is the user.offline of a user last seen online, and its reason.
func offline(last Last, ob Observation) (*Event, Reason) {
	p := ob.Presence
	reason, at, by := ReasonNone, int64(0), ""
	ended := make([]SessionData, 0, len(last.Sessions))
	for _, r := range last.Sessions {
		rr, rat, rby := endOf(r, ob)
		if rat > at || (rat == at && rr > reason) {
			reason, at, by = rr, rat, rby
		}
		ended = append(ended, SessionData{Session: r.Session, Device: r.Device, Epoch: r.Epoch, Gateway: r.Gateway})
	}
	if reason == ReasonNone { // no session was known: cannot happen for an online Last
		reason, at = GatewayFailed, ob.Now
	}
	d := Data{User: p.User, Status: crdt.UserOffline.String(), Reason: reason.String(), Text: p.Text, Emoji: p.Emoji,
		Until: untilText(p.Until), Sessions: ended}
	id := eventID(UserOffline, p.User, last.Opened, last.Revivals, nil)
	return &Event{ID: id, Type: UserOffline, User: p.User, Time: at, Body: encodeBody(UserOffline, at, d), Gateway: by}, reason
}

// endOf says how session r, active when last seen, ended, when, and the
// gateway whose record says so.
func endOf(r SessionRef, ob Observation) (Reason, int64, string) {
	i := slices.IndexFunc(ob.Records, func(s crdt.Session) bool { return s.Device == r.Device })
	if i < 0 {
		// The record is gone: the replica dropped the sessions of a
		// gateway's old incarnation, or purged a failed gateway's.
		return GatewayFailed, ob.Now, r.Gateway
	}
	s := ob.Records[i] // r's record, or a later epoch of the device that ended too
	switch {
	case ob.GatewayDown != nil && ob.GatewayDown(s.Gateway) && s.State == crdt.StateExpired:
		return GatewayFailed, ob.Now, s.Gateway
	case s.State == crdt.StateDisconnected:
		return Disconnected, s.Updated, s.Gateway
	}
	return Expired, s.Updated, s.Gateway
}

func onlineData(p crdt.Presence, active []crdt.Session) Data {
	d := Data{User: p.User, Status: p.Status.String(), Text: p.Text, Emoji: p.Emoji, Until: untilText(p.Until),
		Sessions: make([]SessionData, 0, len(active))}
	for _, s := range active {
		d.Sessions = append(d.Sessions, SessionData{Session: s.ID, Device: s.Device, Epoch: s.Epoch, Gateway: s.Gateway,
			Status: s.Status.String(), Meta: rawJSON(s.Meta), Info: rawJSON(s.Info)})
	}
	return d
}

func untilText(until int64) string {
	if until == 0 {
		return ""
	}
	return formatTime(until)
}

// activeRecords returns the active records, by device (the order
// UserSessions gives).
func activeRecords(recs []crdt.Session) []crdt.Session {
	var out []crdt.Session
	for _, s := range recs {
		if s.State == crdt.StateActive {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b crdt.Session) int { return cmp.Compare(a.Device, b.Device) })
	return out
}

func ref(s crdt.Session) SessionRef {
	return SessionRef{Device: s.Device, Session: s.ID, Epoch: s.Epoch, Gateway: s.Gateway}
}

func refs(ss []crdt.Session) []SessionRef {
	out := make([]SessionRef, len(ss))
	for i, s := range ss {
		out[i] = ref(s)
	}
	return out
}

// idEncoding is base32 without padding, lower case: 26 characters for
// 16 bytes, only [a-z2-7], never a full stop (the id is part of what is
// signed, delimited by full stops).
var idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// eventID is "msg_" and the first 16 bytes of SHA-256 over the type, the
// user, the opening session, its revivals and extra, base32.
func eventID(t Type, user string, opened SessionRef, revivals uint32, extra []byte) string {
	h := newHasher()
	h.str("rollcall-webhook-v1").str(t.String()).str(user).str(opened.Device).str(opened.Session).u64(opened.Epoch)
	if revivals > 0 {
		h.u64(uint64(revivals))
	}
	h.buf = append(h.buf, extra...)
	sum := sha256.Sum256(h.buf)
	return "msg_" + idEncoding.EncodeToString(sum[:16])
}

// hasher builds an unambiguous byte string: each string length-prefixed.
type hasher struct{ buf []byte }

func newHasher() *hasher { return &hasher{buf: make([]byte, 0, 128)} }

func (h *hasher) str(s string) *hasher {
	h.buf = binary.AppendUvarint(h.buf, uint64(len(s)))
	h.buf = append(h.buf, s...)
	return h
}

func (h *hasher) u64(v uint64) *hasher {
	h.buf = binary.BigEndian.AppendUint64(h.buf, v)
	return h
}

func (h *hasher) sum() []byte { return h.buf }
