package redisgw

import (
	"encoding/json"
	"slices"
	"strings"

	"github.com/rollcall/rollcall/protocol"
)

// makePresence aggregates a user's live sessions as Rollcall does without
// account settings: offline with none, away when all are away, otherwise
// available (busy from a device that is not authoritative counts as
// available, and the baseline has no authoritative device).
func makePresence(user string, sts []stored, version uint64) protocol.Presence {
	p := protocol.Presence{User: user, Status: "offline", Sessions: []protocol.SessionInfo{}, Version: version}
	if len(sts) == 0 {
		return p
	}
	slices.SortFunc(sts, func(a, b stored) int { return strings.Compare(a.Device, b.Device) })
	p.Online = true
	p.Status = "away"
	for _, s := range sts {
		p.Sessions = append(p.Sessions, protocol.SessionInfo{Session: s.Session, Device: s.Device, Epoch: s.Epoch,
			Gateway: s.Gateway, Status: s.Status})
		if s.Status != "away" {
			p.Status = "available"
		}
	}
	return p
}

func eventLine(user string, sts []stored, version uint64) []byte {
	b, _ := json.Marshal(protocol.Event{Op: protocol.OpEvent, Presence: makePresence(user, sts, version)})
	return b
}
