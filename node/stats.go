package node

import (
	"strconv"
	"sync/atomic"

	"github.com/rollcall/rollcall/crdt"
)

// counters are the node's monotonically increasing counters.
type counters struct {
	accepted       atomic.Uint64 // TCP connections accepted
	overloaded     atomic.Uint64 // connections refused at MaxConnections
	sessionsOpened atomic.Uint64 // successful hellos
	expired        atomic.Uint64 // sessions ended by silence
	superseded     atomic.Uint64 // connections closed because a newer epoch took their session
	slowConsumers  atomic.Uint64 // connections dropped for not reading
	authFailed     atomic.Uint64 // hellos rejected for their token
	badRequests    atomic.Uint64 // error replies to malformed or invalid requests
	events         atomic.Uint64 // event frames queued
	messages       atomic.Uint64 // message frames queued
	messageDrops   atomic.Uint64 // message frames not queued: the recipient's queue was past its message share
	rateLimited    atomic.Uint64 // requests refused with rate_limited
	forbidden      atomic.Uint64 // requests (and hellos) refused with forbidden
	tokenExpired   atomic.Uint64 // sessions ended because their token expired (also counted in disconnected)
	routeFailures  atomic.Uint64 // Cluster.Route and Kicker.Kick calls that failed
	published      atomic.Uint64 // deltas handed to Cluster.Publish (or written standalone)

	tlsHandshakeFailures atomic.Uint64 // client connections closed for a failed or timed-out TLS handshake
	tooManySessions      atomic.Uint64 // hellos refused at MaxSessionsPerUser
	tooManyConnections   atomic.Uint64 // connections refused at MaxConnectionsPerIP
	outOfFiles           atomic.Uint64 // connections refused overloaded because accept ran out of descriptors (also in overloaded)

	panics atomic.Uint64 // panics recovered while serving a client connection (panics.go)

	httpOverloaded         atomic.Uint64 // HTTP connections refused at MaxHTTPConnections
	httpTooManyConnections atomic.Uint64 // HTTP connections refused at MaxConnectionsPerIP

	// heartbeats counts the heartbeats of closed connections (open ones
	// count their own: conn.heartbeats); metrics.go reports the sum as the
	// requests of op "hb".
	heartbeats atomic.Uint64

	m metricCounters // labelled counters (metrics.go)
}

// Stats is a snapshot of a node's counters and gauges (GET /v1/stats).
type Stats struct {
	Node        string `json:"node"`
	Origin      string `json:"origin"`
	Connections int    `json:"connections"` // open TCP connections
	Sessions    int    `json:"sessions"`    // active sessions this node owns
	Draining    bool   `json:"draining"`

	Accepted       uint64 `json:"accepted"`
	Overloaded     uint64 `json:"overloaded"`
	SessionsOpened uint64 `json:"sessions_opened"`
	Disconnected   uint64 `json:"disconnected"`
	Expired        uint64 `json:"expired"`
	Superseded     uint64 `json:"superseded"`
	SlowConsumers  uint64 `json:"slow_consumers"`
	AuthFailed     uint64 `json:"auth_failed"`
	BadRequests    uint64 `json:"bad_requests"`
	Events         uint64 `json:"events"`
	Messages       uint64 `json:"messages"`
	MessageDrops   uint64 `json:"message_drops"`
	RateLimited    uint64 `json:"rate_limited"` // requests and sends refused
	Forbidden      uint64 `json:"forbidden"`
	TokenExpired   uint64 `json:"token_expired"`
	RouteFailures  uint64 `json:"route_failures"`
	Published      uint64 `json:"published"`

	TLSHandshakeFailures uint64 `json:"tls_handshake_failures"`
	TooManySessions      uint64 `json:"too_many_sessions"`
	TooManyConnections   uint64 `json:"too_many_connections"`

	WatchedUsers  int `json:"watched_users"`
	WatchedGroups int `json:"watched_groups"`

	Replica crdt.Stats `json:"replica"`
}

// Stats returns a snapshot of the node's counters. It walks the replica
// (O(records)): for monitoring, not hot paths.
func (n *Node) Stats() Stats {
	lk := lockOf(&n.mu)
	defer lk.unlock()
	st := Stats{
		Node: n.cfg.Name, Origin: n.origin.String(),
		Connections: len(n.conns), Sessions: n.localCount, Draining: n.draining,
		WatchedUsers: len(n.users), WatchedGroups: len(n.groups),
		Replica: n.replica.Stats(),
	}
	lk.unlock()
	c := &n.stats
	st.Accepted = c.accepted.Load()
	st.Overloaded = c.overloaded.Load()
	st.SessionsOpened = c.sessionsOpened.Load()
	st.Disconnected = c.m.totalDisconnects()
	st.Expired = c.expired.Load()
	st.Superseded = c.superseded.Load()
	st.SlowConsumers = c.slowConsumers.Load()
	st.AuthFailed = c.authFailed.Load()
	st.BadRequests = c.badRequests.Load()
	st.Events = c.events.Load()
	st.Messages = c.messages.Load()
	st.MessageDrops = c.messageDrops.Load()
	st.RateLimited = c.rateLimited.Load()
	st.Forbidden = c.forbidden.Load()
	st.TokenExpired = c.tokenExpired.Load()
	st.RouteFailures = c.routeFailures.Load()
	st.Published = c.published.Load()
	st.TLSHandshakeFailures = c.tlsHandshakeFailures.Load()
	st.TooManySessions = c.tooManySessions.Load()
	st.TooManyConnections = c.tooManyConnections.Load()
	return st
}

func utoa(v uint64) string { return strconv.FormatUint(v, 10) }
