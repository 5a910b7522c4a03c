package client

import (
	"encoding/json"
)

// The wire shapes of the client protocol (docs/protocol.md), mirrored from
// node/protocol.go so that importing this package does not pull in the
// gateway and its dependencies. TestWireMatchesNode checks that every field
// here has the JSON name node gives it.

const (
	opHello   = "hello"
	opHB      = "hb"
	opStatus  = "status"
	opJoin    = "join"
	opLeave   = "leave"
	opGet     = "get"
	opGroup   = "group"
	opLocate  = "locate"
	opSub     = "sub"
	opUnsub   = "unsub"
	opSend    = "send"
	opBye     = "bye"
	opRefresh = "refresh"

	opWelcome = "welcome"
	opEvent   = "event"
	opMessage = "message"
	opError   = "error"
)

// maxUsersPerRequest bounds the users of one get, sub or unsub
// (protocol.MaxUsersPerRequest).
const maxUsersPerRequest = 1000

// request is any client request.
type request struct {
	Op        string          `json:"op"`
	ID        uint64          `json:"id,omitempty"`
	User      string          `json:"user,omitempty"`
	Device    string          `json:"device,omitempty"`
	Token     string          `json:"token,omitempty"`
	LastEpoch uint64          `json:"last_epoch,omitempty"`
	Groups    []string        `json:"groups,omitempty"`
	Status    string          `json:"status,omitempty"`
	Group     string          `json:"group,omitempty"`
	Users     []string        `json:"users,omitempty"`
	To        string          `json:"to,omitempty"`
	Body      json.RawMessage `json:"body,omitempty"`
}

// head is what every line from the gateway is first decoded into.
type head struct {
	Op       string          `json:"op"`
	ID       json.RawMessage `json:"id,omitempty"`
	Code     string          `json:"code"`
	Message  string          `json:"message"`
	Gateways []string        `json:"gateways,omitempty"`
}

// welcomeFrame is the reply to hello.
type welcomeFrame struct {
	Session        string `json:"session"`
	User           string `json:"user"`
	Device         string `json:"device"`
	Epoch          uint64 `json:"epoch"`
	Gateway        string `json:"gateway"`
	HeartbeatMS    int64  `json:"heartbeat_ms"`
	TimeoutMS      int64  `json:"timeout_ms"`
	Protocol       int    `json:"protocol"`
	TokenExpiresAt string `json:"token_expires_at,omitempty"`
}

// okFrame is the reply to status, join, send, refresh, ...
type okFrame struct {
	Delivered      *int   `json:"delivered,omitempty"`
	TokenExpiresAt string `json:"token_expires_at,omitempty"`
}

// presenceFrame is the reply to get.
type presenceFrame struct {
	Users []Presence `json:"users"`
}

// groupFrame is the reply to group.
type groupFrame struct {
	Group   string     `json:"group"`
	Online  int        `json:"online"`
	Members []Presence `json:"members"`
}

// locateFrame is the reply to locate.
type locateFrame struct {
	User     string        `json:"user"`
	Sessions []SessionInfo `json:"sessions"`
}

// eventFrame is a pushed event.
type eventFrame struct {
	Presence
	Group  string `json:"group,omitempty"`
	Member *bool  `json:"member,omitempty"`
}

// messageFrame is a pushed message.
type messageFrame struct {
	From       string          `json:"from"`
	FromDevice string          `json:"from_device"`
	Body       json.RawMessage `json:"body"`
}

// SessionInfo is one active session of a user.
type SessionInfo struct {
	Session string `json:"session"`
	Device  string `json:"device"`
	Epoch   uint64 `json:"epoch"`
	Gateway string `json:"gateway"`
	Status  string `json:"status"`
	// GatewayAddr is the owning gateway's client address, when known (in
	// Locate results).
	GatewayAddr string `json:"gateway_addr,omitempty"`
}

// Presence is a user's aggregate presence. Version orders observations of
// one user: higher is newer.
type Presence struct {
	User     string        `json:"user"`
	Online   bool          `json:"online"`
	Status   string        `json:"status"`
	Sessions []SessionInfo `json:"sessions"`
	Version  uint64        `json:"version"`
}
