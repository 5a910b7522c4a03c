package client

import (
	"time"

	"github.com/rollcall/rollcall/protocol"
)

// LastSeen returns when a user's last session ended, from a presence (an
// Event's, Get's or a group page's): its LastSeen, which a gateway sends
// while the user is offline. ok is false while the user is online, when
// the user was not seen within the gateways' --last-seen-retention, and
// for a LastSeen that is not an RFC 3339 time.
func LastSeen(p protocol.Presence) (t time.Time, ok bool) {
	if p.LastSeen == "" {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, p.LastSeen)
	return t, err == nil
}
