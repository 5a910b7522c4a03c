package crdt

import "fmt"

// State is the lifecycle state of one session record.
type State uint8

const (
	// StateActive is a connected, heartbeating session.
	StateActive State = iota
	// StateDisconnected is a session that ended with a clean close.
	StateDisconnected
	// StateExpired is a session whose deadline passed: a detected failure.
	StateExpired
)

// Terminal reports whether the state ends a session epoch.
func (s State) Terminal() bool { return s != StateActive }

func (s State) String() string {
	switch s {
	case StateActive:
		return "active"
	case StateDisconnected:
		return "disconnected"
	case StateExpired:
		return "expired"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// Status is the status a single device reports.
type Status uint8

const (
	// StatusAvailable is the default device status.
	StatusAvailable Status = iota
	// StatusAway is an idle device.
	StatusAway
	// StatusBusy is a device whose user does not want to be disturbed; it
	// counts only from the authoritative device.
	StatusBusy
)

func (s Status) String() string {
	switch s {
	case StatusAvailable:
		return "available"
	case StatusAway:
		return "away"
	case StatusBusy:
		return "busy"
	}
	return fmt.Sprintf("status(%d)", uint8(s))
}

// ParseStatus parses a device status name.
func ParseStatus(s string) (Status, error) {
	switch s {
	case "available":
		return StatusAvailable, nil
	case "away":
		return StatusAway, nil
	case "busy":
		return StatusBusy, nil
	}
	return 0, fmt.Errorf("unknown device status %q (want available, away or busy)", s)
}

// Override is an account-level setting that overrides device statuses.
type Override uint8

const (
	// OverrideNone leaves the status to the devices.
	OverrideNone Override = iota
	// OverrideAway shows the user away while online.
	OverrideAway
	// OverrideDND shows the user as do-not-disturb while online.
	OverrideDND
	// OverrideBusy shows the user busy while online.
	OverrideBusy
	// OverrideInvisible shows the user offline to every reader but the
	// user (and backends): Presence.Invisible, Presence.Public. The status
	// itself comes from the devices, as with OverrideNone.
	OverrideInvisible

	maxOverrideEnum = OverrideInvisible
)

func (o Override) String() string {
	switch o {
	case OverrideNone:
		return "none"
	case OverrideAway:
		return "away"
	case OverrideDND:
		return "dnd"
	case OverrideBusy:
		return "busy"
	case OverrideInvisible:
		return "invisible"
	}
	return fmt.Sprintf("override(%d)", uint8(o))
}

// ParseOverride parses an account override name.
func ParseOverride(s string) (Override, error) {
	switch s {
	case "none", "":
		return OverrideNone, nil
	case "away":
		return OverrideAway, nil
	case "dnd":
		return OverrideDND, nil
	case "busy":
		return OverrideBusy, nil
	case "invisible":
		return OverrideInvisible, nil
	}
	return 0, fmt.Errorf("unknown override %q (want none, away, dnd, busy or invisible)", s)
}

// UserStatus is the aggregate status of a user, as clients see it.
type UserStatus uint8

const (
	// UserOffline means no active session.
	UserOffline UserStatus = iota
	// UserAvailable means online and available.
	UserAvailable
	// UserAway means online and away.
	UserAway
	// UserBusy means online and busy.
	UserBusy
	// UserDND means online, do not disturb.
	UserDND
)

func (s UserStatus) String() string {
	switch s {
	case UserOffline:
		return "offline"
	case UserAvailable:
		return "available"
	case UserAway:
		return "away"
	case UserBusy:
		return "busy"
	case UserDND:
		return "dnd"
	}
	return fmt.Sprintf("userstatus(%d)", uint8(s))
}

// Origin identifies one incarnation of a gateway: the only writer of the
// records it stamps. A gateway that restarts under the same name gets a new,
// larger Incarnation.
type Origin struct {
	Node        string
	Incarnation uint64
}

func (o Origin) String() string { return fmt.Sprintf("%s#%d", o.Node, o.Incarnation) }

func (o Origin) less(p Origin) bool {
	if o.Node != p.Node {
		return o.Node < p.Node
	}
	return o.Incarnation < p.Incarnation
}
