package protocol

import "encoding/json"

// Version is the version of the client protocol, sent in
// welcome.protocol and printed by `rollcall version`. It changes only with
// an incompatible change: an op, field or code removed, or one whose
// meaning changes. New ops, new fields and new error codes keep it (clients
// ignore what they do not know).
//
//	1  hello/welcome, hb, status, account, join, leave, get, group, locate,
//	   sub, unsub, send, bye; events with version; error codes below
//	   (epoch_exhausted, rate_limited, too_many_sessions and
//	   too_many_connections joined later: new codes are a
//	   compatible change, clients treat unknown codes as errors); refresh,
//	   welcome.token_expires_at, forbidden and token_expired joined with
//	   authorization from token claims; group's limit and cursor, its
//	   reply's next, sub's ok.snapshot and the snapshot and more flags of
//	   events joined with paging; kicked joined with the HTTP API's
//	   disconnect; track and untrack (backend grant) joined with
//	   sessions held on behalf of users.
const Version = 1

// Limits.
const (
	// MaxLineBytes is the default longest request line, newline excluded
	// (a gateway may be configured for longer ones).
	MaxLineBytes = 64 << 10
	// MaxUsersPerRequest bounds the users of one get, sub or unsub.
	MaxUsersPerRequest = 1000
	// MaxSubscriptions bounds the subjects (users plus groups) one
	// connection subscribes to.
	MaxSubscriptions = 10000
	// MaxGroups bounds the groups of one session.
	MaxGroups = 256
	// MaxNameLen bounds user, device, group and token-subject names, in
	// bytes.
	MaxNameLen = 256
	// MaxTokenLen bounds a hello's token.
	MaxTokenLen = 8 << 10
	// MaxStatusTextChars bounds an account's status text, in characters
	// (Unicode code points) of valid UTF-8.
	MaxStatusTextChars = 128
	// MaxStatusEmojiBytes bounds an account's status emoji, in bytes of
	// valid UTF-8.
	MaxStatusEmojiBytes = 16
	// MaxMetaBytes bounds a session's meta, a JSON object, in bytes once
	// compacted (insignificant white space removed).
	MaxMetaBytes = 1 << 10
	// MaxInfoBytes bounds a session's info, the JSON object of its token's
	// rollcall.info claim, in bytes once compacted.
	MaxInfoBytes = 1 << 10
	// MaxEpoch is the largest session epoch a gateway issues: 2^53-1, the
	// largest integer a browser holds exactly. A hello's last_epoch must be
	// below it, and a (user, device) whose next epoch would exceed it is
	// refused with CodeEpochExhausted.
	MaxEpoch = 1<<53 - 1
	// DefaultGroupPage is the most members a group reply holds when the
	// request gives no limit.
	DefaultGroupPage = 1000
	// MaxGroupPage bounds a group request's limit. A gateway may cut a
	// page shorter, to fit the connection's outbound queue; its next then
	// says where to go on.
	MaxGroupPage = 5000
	// MaxHTTPBodyBytes bounds the body of an HTTP API request (POST
	// /v1/presence, /v1/send, /v1/users/{user}/disconnect): room for
	// MaxUsersPerRequest names of MaxNameLen bytes, most of them escaped.
	MaxHTTPBodyBytes = 1 << 20
	// MaxSendBodyBytes bounds the body of a message sent through the HTTP
	// API (POST /v1/send): what a send request in a line of MaxLineBytes
	// can carry, and what the cluster routes to another gateway.
	MaxSendBodyBytes = 64 << 10
	// MaxTrackPerRequest bounds the sessions of one track or untrack.
	MaxTrackPerRequest = 1000
)

// Ops. Requests are sent by clients; the rest by the gateway.
const (
	OpHello   = "hello"   // request: authenticate and open the session
	OpHB      = "hb"      // request: heartbeat; reply (same op) only with an id
	OpStatus  = "status"  // request: set this device's status
	OpAccount = "account" // request: set the user's account override, status text and emoji, until, authoritative device
	OpJoin    = "join"    // request: join a group
	OpLeave   = "leave"   // request: leave a group
	OpGet     = "get"     // request: presence of users
	OpGroup   = "group"   // request: online members of a group
	OpLocate  = "locate"  // request: active sessions of a user
	OpSub     = "sub"     // request: subscribe to users or a group
	OpUnsub   = "unsub"   // request: unsubscribe
	OpSend    = "send"    // request: message every active session of a user
	OpBye     = "bye"     // request: end the session cleanly
	OpRefresh = "refresh" // request: present a new token for the session's user before the current one expires
	OpMeta    = "meta"    // request: set this session's meta
	OpTrack   = "track"   // request (backend grant): hold sessions on behalf of users, for as long as this connection lives
	OpUntrack = "untrack" // request (backend grant): end sessions this connection tracks

	OpWelcome   = "welcome"   // reply to hello
	OpOK        = "ok"        // reply to status, account, meta, join, leave, sub, unsub, send, refresh, bye
	OpPresence  = "presence"  // reply to get
	OpEvent     = "event"     // pushed: a subscribed user's presence changed
	OpMessage   = "message"   // pushed: a message sent to this user
	OpError     = "error"     // reply or pushed: something went wrong
	OpTracked   = "tracked"   // reply to track
	OpUntracked = "untracked" // reply to untrack
)

// IsRequestOp reports whether op is one a client may send.
func IsRequestOp(op string) bool {
	switch op {
	case OpHello, OpHB, OpStatus, OpAccount, OpJoin, OpLeave, OpGet, OpGroup,
		OpLocate, OpSub, OpUnsub, OpSend, OpBye, OpRefresh, OpMeta, OpTrack, OpUntrack:
		return true
	}
	return false
}

// ErrorCode is the machine-readable code of an error line.
type ErrorCode string

// Error codes.
const (
	CodeBadJSON          ErrorCode = "bad_json"          // the line is not a JSON object
	CodeLineTooLong      ErrorCode = "line_too_long"     // the line exceeds the gateway's longest line; closes
	CodeUnknownOp        ErrorCode = "unknown_op"        // op is not one of the request ops
	CodeBadRequest       ErrorCode = "bad_request"       // a field is missing, malformed or over a limit
	CodeAuthFailed       ErrorCode = "auth_failed"       // the token is missing, invalid or for another user; closes
	CodeHandshakeTimeout ErrorCode = "handshake_timeout" // no valid hello in time; closes
	CodeNotAuthenticated ErrorCode = "not_authenticated" // a request before hello
	CodeSuperseded       ErrorCode = "superseded"        // a newer connection took this (user, device); closes
	CodeShuttingDown     ErrorCode = "shutting_down"     // the gateway is draining; closes
	CodeSlowConsumer     ErrorCode = "slow_consumer"     // the client did not read fast enough; closes
	CodeExpired          ErrorCode = "expired"           // no request within the timeout; closes
	CodeInternal         ErrorCode = "internal"          // a gateway-side failure; the request changed nothing
	CodeOverloaded       ErrorCode = "overloaded"        // the gateway holds its most connections already; closes at once
	CodeEpochExhausted   ErrorCode = "epoch_exhausted"   // the (user, device) holds MaxEpoch: no newer epoch exists
	CodeRateLimited      ErrorCode = "rate_limited"      // the connection's requests or the session's sends came too fast; nothing was done

	CodeForbidden    ErrorCode = "forbidden"     // the session's token does not allow the request; nothing was done
	CodeTokenExpired ErrorCode = "token_expired" // the session's token expired without a refresh; closes (a clean disconnect)

	// CodeTooManySessions refuses a hello of a user that already holds
	// the most active sessions a user may hold in the cluster, unless it
	// reconnects one of their devices; closes.
	CodeTooManySessions ErrorCode = "too_many_sessions"
	// CodeTooManyConnections refuses a connection, right after accept,
	// from an address that already holds the most connections one address
	// may hold to this gateway; closes at once.
	CodeTooManyConnections ErrorCode = "too_many_connections"
	// CodeUnsupportedProtocol refuses a hello that asks for a protocol
	// version other than Version; closes.
	CodeUnsupportedProtocol ErrorCode = "unsupported_protocol"
	// CodeKicked ends a session the app's backend disconnected (POST
	// /v1/users/{user}/disconnect); closes. The session is written
	// disconnected. A client should not reconnect by itself: the backend
	// decided this session ends.
	CodeKicked ErrorCode = "kicked"
)

// Closes reports whether the gateway closes the connection after sending
// an error with this code: a client that receives one knows its session
// ended, and why.
func (c ErrorCode) Closes() bool {
	switch c {
	case CodeAuthFailed, CodeHandshakeTimeout, CodeLineTooLong, CodeSuperseded,
		CodeShuttingDown, CodeSlowConsumer, CodeExpired, CodeTokenExpired,
		CodeTooManySessions, CodeTooManyConnections, CodeUnsupportedProtocol, CodeKicked:
		return true
	}
	return false
}

// String returns the code as sent on the wire.
func (c ErrorCode) String() string { return string(c) }

// Request is any client request; which fields matter depends on Op.
type Request struct {
	Op string `json:"op"`
	// ID, when present, is echoed in the reply: a JSON string or number.
	ID json.RawMessage `json:"id,omitempty"`

	// hello (token also refresh)
	User      string   `json:"user,omitempty"`
	Device    string   `json:"device,omitempty"`
	Token     string   `json:"token,omitempty"`
	LastEpoch uint64   `json:"last_epoch,omitempty"`
	Groups    []string `json:"groups,omitempty"`
	// Protocol is the protocol version the client speaks (absent or 0:
	// Version).
	Protocol int `json:"protocol,omitempty"`

	// hello, status
	Status string `json:"status,omitempty"`

	// account: absent fields are left unchanged; "" clears text, emoji
	// and until. Override is none, away, dnd, busy or invisible. Until is
	// an RFC 3339 time after which override, text and emoji lapse.
	Override            *string `json:"override,omitempty"`
	AuthoritativeDevice *string `json:"authoritative_device,omitempty"`
	Text                *string `json:"text,omitempty"`
	Emoji               *string `json:"emoji,omitempty"`
	Until               *string `json:"until,omitempty"`

	// hello, meta: the session's meta, a JSON object of at most
	// MaxMetaBytes once compacted ({} for none)
	Meta json.RawMessage `json:"meta,omitempty"`

	// join, leave, group, sub, unsub
	Group string `json:"group,omitempty"`
	// group: Limit is the most members of the reply (absent:
	// DefaultGroupPage; 0: none, the count only; at most MaxGroupPage),
	// Cursor the previous reply's Next (absent: from the first member).
	// Members come in user-name order; a cursor is the last user a page
	// held, so it stays meaningful while members come and go.
	Limit  *int   `json:"limit,omitempty"`
	Cursor string `json:"cursor,omitempty"`
	// get, sub, unsub
	Users []string `json:"users,omitempty"`

	// send
	To   string          `json:"to,omitempty"`
	Body json.RawMessage `json:"body,omitempty"`

	// track, untrack: at most MaxTrackPerRequest, each (user, device)
	// once (untrack reads only user and device)
	Sessions []TrackSession `json:"sessions,omitempty"`
}

// TrackSession is one session of a track or untrack request: a session
// the connection holds on behalf of User. Status (absent: available),
// Groups and Meta are as a hello's; a track of a (user, device) the
// connection already tracks sets them anew (absent ones to their
// defaults), keeping the session's id and epoch.
type TrackSession struct {
	User   string          `json:"user"`
	Device string          `json:"device"`
	Status string          `json:"status,omitempty"`
	Groups []string        `json:"groups,omitempty"`
	Meta   json.RawMessage `json:"meta,omitempty"`
}

// TrackResult is one session of a tracked or untracked reply, in the
// request's order: its id and epoch. In a tracked reply, an entry the
// gateway could not open carries Code and Message instead
// (epoch_exhausted, too_many_sessions: they close nothing here); in an
// untracked reply, a (user, device) the connection did not track (or lost
// to a newer connection) has neither session nor epoch.
type TrackResult struct {
	User    string    `json:"user"`
	Device  string    `json:"device"`
	Session string    `json:"session,omitempty"`
	Epoch   uint64    `json:"epoch,omitempty"`
	Code    ErrorCode `json:"code,omitempty"`
	Message string    `json:"message,omitempty"`
}

// TrackReply is the reply to track (Op tracked) and untrack (Op
// untracked).
type TrackReply struct {
	Op       string          `json:"op"`
	ID       json.RawMessage `json:"id,omitempty"`
	Sessions []TrackResult   `json:"sessions"`
}

// Head is the envelope of any line from the gateway: what a client first
// decodes a line into to route it (a reply by ID, a push by Op), with an
// error line's fields.
type Head struct {
	Op       string          `json:"op"`
	ID       json.RawMessage `json:"id,omitempty"`
	Code     ErrorCode       `json:"code"`
	Message  string          `json:"message"`
	Gateways []string        `json:"gateways,omitempty"`
}

// Welcome is the reply to a successful hello.
type Welcome struct {
	Op          string          `json:"op"`
	ID          json.RawMessage `json:"id,omitempty"`
	Session     string          `json:"session"`
	User        string          `json:"user"`
	Device      string          `json:"device"`
	Epoch       uint64          `json:"epoch"`
	Gateway     string          `json:"gateway"`
	HeartbeatMS int64           `json:"heartbeat_ms"`
	TimeoutMS   int64           `json:"timeout_ms"`
	ExpiresAt   string          `json:"expires_at"`
	Protocol    int             `json:"protocol"`
	// TokenExpiresAt is the token's exp (RFC 3339, UTC): refresh before
	// it, or the session ends with token_expired. Absent on a --dev
	// gateway.
	TokenExpiresAt string `json:"token_expires_at,omitempty"`
}

// RefreshReply is the reply to a successful refresh: the new token's exp
// (absent on a --dev gateway).
type RefreshReply struct {
	Op             string          `json:"op"`
	ID             json.RawMessage `json:"id,omitempty"`
	TokenExpiresAt string          `json:"token_expires_at,omitempty"`
}

// HBReply is the reply to an hb that carries an id.
type HBReply struct {
	Op        string          `json:"op"`
	ID        json.RawMessage `json:"id,omitempty"`
	ExpiresAt string          `json:"expires_at"`
}

// OK is the reply to requests that return nothing else; send fills
// Delivered, sub Snapshot.
type OK struct {
	Op        string          `json:"op"`
	ID        json.RawMessage `json:"id,omitempty"`
	Delivered *int            `json:"delivered,omitempty"`
	// Snapshot, in a sub's ok, is how many snapshot events follow (each
	// with Event.Snapshot, all but the last with Event.More).
	Snapshot *int `json:"snapshot,omitempty"`
}

// SessionInfo is one active session as clients see it.
type SessionInfo struct {
	Session string `json:"session"`
	Device  string `json:"device"`
	Epoch   uint64 `json:"epoch"`
	Gateway string `json:"gateway"`
	Status  string `json:"status"`
	// GatewayAddr is the owning gateway's client address, when known (in
	// locate replies; from the cluster's member metadata).
	GatewayAddr string `json:"gateway_addr,omitempty"`
	// Meta is the session's meta (hello, meta); Info is what its token's
	// issuer vouches for (the rollcall.info claim). Absent when none.
	Meta json.RawMessage `json:"meta,omitempty"`
	Info json.RawMessage `json:"info,omitempty"`
}

// Presence is a user's aggregate presence. Version orders observations of
// one user on one gateway: higher means newer or equal state. It is
// strictly increasing per user within one connection's event stream.
type Presence struct {
	User     string        `json:"user"`
	Online   bool          `json:"online"`
	Status   string        `json:"status"`
	Sessions []SessionInfo `json:"sessions"`
	Version  uint64        `json:"version"`
	// Text, Emoji and Until are the account's status text, emoji and the
	// RFC 3339 time they and the override lapse at; absent when none or
	// lapsed.
	Text  string `json:"text,omitempty"`
	Emoji string `json:"emoji,omitempty"`
	Until string `json:"until,omitempty"`
	// LastSeen, while the user is offline, is the RFC 3339 time the
	// user's last session ended; absent while online, and for a user
	// not seen within the gateways' --last-seen-retention.
	LastSeen string `json:"last_seen,omitempty"`
	// Invisible is true, in the user's own reads (and a backend's), while
	// the account's override is invisible: the rest is the truth. Every
	// other reader sees an invisible user as an offline one, without it.
	Invisible bool `json:"invisible,omitempty"`
}

// PresenceReply is the reply to get.
type PresenceReply struct {
	Op    string          `json:"op"`
	ID    json.RawMessage `json:"id,omitempty"`
	Users []Presence      `json:"users"`
}

// GroupReply is the reply to group: a page of the group's online members,
// in user-name order. Online counts every online member, on every page.
// Next, when not empty, is the Cursor of the next page; empty, the page is
// the last.
type GroupReply struct {
	Op      string          `json:"op"`
	ID      json.RawMessage `json:"id,omitempty"`
	Group   string          `json:"group"`
	Online  int             `json:"online"`
	Members []Presence      `json:"members"`
	Next    string          `json:"next"`
}

// LocateReply is the reply to locate: the user's active sessions.
type LocateReply struct {
	Op       string          `json:"op"`
	ID       json.RawMessage `json:"id,omitempty"`
	User     string          `json:"user"`
	Sessions []SessionInfo   `json:"sessions"`
}

// Event is pushed to subscribers: the subject's presence, and for a group
// subscription the group and whether the user is (still) an online member
// of it; "member":false tells a group subscriber the user left its view.
//
// The events of a sub's snapshot (the subjects' state when it subscribed)
// carry Snapshot, and all but the last of them More. They are sent in
// pages the connection's outbound queue holds, so change events may come
// between them: each event, snapshot or change, is the presence as it
// was read, and versions still only grow per subject.
type Event struct {
	Op string `json:"op"`
	Presence
	Group    string `json:"group,omitempty"`
	Member   *bool  `json:"member,omitempty"`
	Snapshot bool   `json:"snapshot,omitempty"`
	More     bool   `json:"more,omitempty"`
}

// MessageFrame is pushed to every active session of a message's recipient.
type MessageFrame struct {
	Op         string          `json:"op"`
	From       string          `json:"from"`
	FromDevice string          `json:"from_device"`
	Body       json.RawMessage `json:"body"`
}

// ErrorFrame is an error line.
type ErrorFrame struct {
	Op      string          `json:"op"`
	Code    ErrorCode       `json:"code"`
	Message string          `json:"message"`
	ID      json.RawMessage `json:"id,omitempty"`
	// Gateways, in shutting_down only, are the client addresses of the
	// other live gateways (host:port, in random order), where the client
	// may reconnect at once with last_epoch. Absent when none is known.
	Gateways []string `json:"gateways,omitempty"`
}
