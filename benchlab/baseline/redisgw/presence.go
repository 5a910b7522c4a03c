package redisgw

import (
	"encoding/json"
	"slices"
	"strings"
)

// sessionInfo and presence are Rollcall's presence shapes
// (docs/protocol.md#presence-and-events).
type sessionInfo struct {
	Session string `json:"session"`
	Device  string `json:"device"`
	Epoch   uint64 `json:"epoch"`
	Gateway string `json:"gateway"`
	Status  string `json:"status"`
}

type presence struct {
	User     string        `json:"user"`
	Online   bool          `json:"online"`
	Status   string        `json:"status"`
	Sessions []sessionInfo `json:"sessions"`
	Version  uint64        `json:"version"`
}

// makePresence aggregates a user's live sessions as Rollcall does without
// account settings: offline with none, away when all are away, otherwise
// available (busy from a device that is not authoritative counts as
// available, and the baseline has no authoritative device).
func makePresence(user string, sts []stored, version uint64) presence {
	p := presence{User: user, Status: "offline", Sessions: []sessionInfo{}, Version: version}
	if len(sts) == 0 {
		return p
	}
	slices.SortFunc(sts, func(a, b stored) int { return strings.Compare(a.Device, b.Device) })
	p.Online = true
	p.Status = "away"
	for _, s := range sts {
		p.Sessions = append(p.Sessions, sessionInfo{Session: s.Session, Device: s.Device, Epoch: s.Epoch,
			Gateway: s.Gateway, Status: s.Status})
		if s.Status != "away" {
			p.Status = "available"
		}
	}
	return p
}

func eventLine(user string, sts []stored, version uint64) []byte {
	b, _ := json.Marshal(struct {
		Op string `json:"op"`
		presence
	}{"event", makePresence(user, sts, version)})
	return b
}
