package webhook

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Type is the type of an event: the "type" of its body.
type Type uint8

const (
	// UserOnline: the user had no active session and now has one.
	UserOnline Type = iota
	// UserOffline: the user's last active session ended.
	UserOffline
	// UserStatus: an online user's aggregate status, status text, emoji or
	// their until changed.
	UserStatus

	numTypes
)

func (t Type) String() string {
	switch t {
	case UserOnline:
		return "user.online"
	case UserOffline:
		return "user.offline"
	case UserStatus:
		return "user.status"
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// Types is a set of event types.
type Types uint8

// AllTypes holds every event type.
const AllTypes = Types(1<<numTypes - 1)

// Has reports whether t is in the set.
func (s Types) Has(t Type) bool { return s&(1<<t) != 0 }

// String lists the set's types, comma-separated, in Type order.
func (s Types) String() string {
	var names []string
	for t := range numTypes {
		if s.Has(t) {
			names = append(names, t.String())
		}
	}
	return strings.Join(names, ",")
}

// ParseTypes parses a comma-separated list of event types
// ("user.online,user.offline"). Blank items are skipped; an empty list is
// an error.
func ParseTypes(s string) (Types, error) {
	var set Types
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		found := false
		for t := range numTypes {
			if item == t.String() {
				set |= 1 << t
				found = true
			}
		}
		if !found {
			return 0, fmt.Errorf("unknown webhook event %q (want user.online, user.offline or user.status)", item)
		}
	}
	if set == 0 {
		return 0, fmt.Errorf("no webhook event named (want some of user.online, user.offline, user.status)")
	}
	return set, nil
}

// Reason says why a user went offline.
type Reason uint8

const (
	// ReasonNone: not an offline event.
	ReasonNone Reason = iota
	// Disconnected: the last session ended cleanly (bye, a closed
	// connection past its grace, a drained gateway).
	Disconnected
	// Expired: the last session went silent past its timeout and its
	// gateway expired it.
	Expired
	// GatewayFailed: the gateway that held the last session failed (it
	// stopped answering, or restarted as a new incarnation) and the
	// survivors show its sessions expired.
	GatewayFailed
)

func (r Reason) String() string {
	switch r {
	case ReasonNone:
		return ""
	case Disconnected:
		return "disconnected"
	case Expired:
		return "expired"
	case GatewayFailed:
		return "gateway_failed"
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// Event is one webhook message: the same id and body on every attempt and
// every gateway that sends it.
type Event struct {
	// ID is the webhook-id: "msg_" and 26 base32 characters of a hash of
	// the type, the user and the versions that identify the change (see
	// Decide).
	ID   string
	Type Type
	User string
	// Time is when the change happened, Unix nanoseconds: the owning
	// gateway's write for online, status and the ends it wrote, the
	// deciding gateway's clock for gateway_failed.
	Time int64
	// Body is the JSON body: {"type", "timestamp", "data": Data}.
	Body []byte
	// Gateway is the gateway whose write made the change: the opening
	// session's for user.online, the session that ended last for
	// user.offline, the latest write (a session's or the account's) for
	// user.status; "" when none is known. In a multi-region cluster only
	// its region sends the event. Not part of the body.
	Gateway string
}

// Body is the JSON body of every webhook.
type Body struct {
	Type      string `json:"type"`
	Timestamp string `json:"timestamp"` // RFC 3339, UTC: Event.Time
	Data      Data   `json:"data"`
}

// Data is the data of every event type.
type Data struct {
	User string `json:"user"`
	// Status is the user's aggregate status after the change: available,
	// away, busy or dnd; offline for user.offline.
	Status string `json:"status"`
	// Reason is why the user went offline (user.offline only):
	// disconnected, expired or gateway_failed.
	Reason string `json:"reason,omitempty"`
	// Text, Emoji and Until are the account's status text, emoji and the
	// RFC 3339 time they lapse at; absent when none.
	Text  string `json:"text,omitempty"`
	Emoji string `json:"emoji,omitempty"`
	Until string `json:"until,omitempty"`
	// Sessions are the user's active sessions after the change; for
	// user.offline, the sessions that ended.
	Sessions []SessionData `json:"sessions"`
}

// SessionData is one session in Data.
type SessionData struct {
	Session string `json:"session"`
	Device  string `json:"device"`
	Epoch   uint64 `json:"epoch"`
	Gateway string `json:"gateway"`
	// Status is the device's status (available, away, busy); absent for
	// the ended sessions of user.offline.
	Status string          `json:"status,omitempty"`
	Meta   json.RawMessage `json:"meta,omitempty"`
	Info   json.RawMessage `json:"info,omitempty"`
}

// encodeBody returns the JSON body of an event of type t at time at.
func encodeBody(t Type, at int64, d Data) []byte {
	if d.Sessions == nil {
		d.Sessions = []SessionData{}
	}
	b, err := json.Marshal(Body{Type: t.String(), Timestamp: formatTime(at), Data: d})
	if err != nil {
		// Data holds strings, numbers and raw JSON the replica validated;
		// a failure is a bug, and the event is still worth its type.
		b, _ = json.Marshal(Body{Type: t.String(), Timestamp: formatTime(at), Data: Data{User: d.User, Status: d.Status, Sessions: []SessionData{}}})
	}
	return b
}

func formatTime(unixNano int64) string {
	return time.Unix(0, unixNano).UTC().Format(time.RFC3339Nano)
}

// rawJSON returns a compact JSON object the replica holds as a raw
// message, nil for none.
func rawJSON(s string) json.RawMessage {
	if s == "" {
		return nil
	}
	return json.RawMessage(s)
}
