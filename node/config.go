package node

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/rollcall/rollcall/auth"
	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/protocol"
	"github.com/rollcall/rollcall/webhook"
)

// Config configures a Node. Take DefaultConfig and change what you need;
// New calls Validate, which fills zero values with the defaults below
// (except EventCoalesce and IOUringBatch, whose zero means no window, and
// DisconnectGrace, whose zero means none).
type Config struct {
	// Name is the node (gateway) name: the origin of every record it writes
	// and the "gateway" clients see. Unique in a cluster. Default: hostname.
	Name string

	// ClientAddr is the TCP address clients connect to. Port 0 picks a free
	// port (see Node.ClientAddr). Default 127.0.0.1:7400.
	ClientAddr string

	// HTTPAddr is the address of the HTTP endpoint (/healthz, /v1/...).
	// Empty disables HTTP. Default: empty here; the agent's flag defaults to
	// 127.0.0.1:7401.
	HTTPAddr string

	// WSAllowedOrigins lists the origins whose pages may open the
	// WebSocket endpoint (GET /ws on HTTPAddr), as host patterns
	// (path.Match, e.g. "app.example.com", "*.example.com"). Empty: the
	// page's own origin only (a request without an Origin header, from a
	// program rather than a browser, is always accepted). "*" allows every
	// origin. Default empty; on a Dev node, empty allows every origin.
	WSAllowedOrigins []string

	// WSAddr, when set, is the address of a listener of its own for the
	// WebSocket endpoint (GET /ws and nothing else), for a gateway whose
	// HTTP port is kept private. GET /ws on HTTPAddr is served either way.
	// Default empty: none.
	WSAddr string

	// Bounds on the HTTP port and the WebSocket listener (httpconns.go).
	// A negative timeout disables it (not HTTPIdleTimeout).

	// HTTPReadHeaderTimeout bounds the reading of a request's headers, and
	// over TLS the handshake before them. Default 10s.
	HTTPReadHeaderTimeout time.Duration

	// HTTPReadTimeout bounds the reading of a whole request, body
	// included. Default 30s.
	HTTPReadTimeout time.Duration

	// HTTPWriteTimeout bounds the writing of a response, from the end of
	// the request's headers; it is also the longest profile
	// /debug/pprof/profile will take. Event streams (GET /v1/events,
	// /v1/ui/events) are exempt: each of their writes gets WriteTimeout of
	// its own. Default 60s.
	HTTPWriteTimeout time.Duration

	// HTTPIdleTimeout is how long a keep-alive connection may wait for its
	// next request before it is closed. At most MaxHTTPIdleTimeout (2m).
	// Default 60s.
	HTTPIdleTimeout time.Duration

	// HTTPMaxHeaderBytes bounds the size of a request's headers (the
	// request line included); a larger request gets 431. Default 32 KiB.
	HTTPMaxHeaderBytes int

	// MaxHTTPConnections caps the connections the HTTP listeners (HTTPAddr
	// and WSAddr together) hold at once; one more is answered 503
	// overloaded at accept. Each also counts against MaxConnectionsPerIP
	// (429 too_many_connections past it), until it closes or is upgraded
	// to a WebSocket (which then counts as a client connection). Default
	// 1024; negative means no cap.
	MaxHTTPConnections int

	// MaxEventStreamsPerSubject and MaxEventStreamsPerIP cap the change
	// streams (GET /v1/events) open at once for one token subject (the
	// token's sub; the admin token and a Dev node have none) and from one
	// source address (as MaxConnectionsPerIP counts them); one more is
	// answered 429. Defaults 16 and 64; negative means no cap.
	MaxEventStreamsPerSubject int
	MaxEventStreamsPerIP      int

	// IPv6PrefixBits is the IPv6 prefix the per-address limits
	// (MaxConnectionsPerIP, MaxEventStreamsPerIP, the hello rate per
	// address) count by: a host given a /64 has every address in it.
	// 128 counts each address apart. Default 64.
	IPv6PrefixBits int

	// Heartbeat is the interval the node tells clients to heartbeat at
	// (welcome.heartbeat_ms). Shorter detects dead clients sooner but costs
	// more traffic. Default 5s.
	Heartbeat time.Duration

	// Timeout is the silence after which a session expires. It must exceed
	// Heartbeat plus jitter and network delay; three heartbeats is usual.
	// Default 15s.
	Timeout time.Duration

	// HandshakeTimeout bounds the time from accept to a successful hello.
	// Default 10s.
	HandshakeTimeout time.Duration

	// SweepInterval is the resolution of the expiry sweeper (a timer wheel
	// with one slot per interval): a silent session expires between Timeout
	// and Timeout+SweepInterval after its last request. Smaller is more
	// precise but wakes more often. Default min(250ms, Timeout/10).
	SweepInterval time.Duration

	// StallThreshold is how late the sweeper's tick must be, beyond
	// SweepInterval and measured on the real monotonic clock (not Clock), to
	// count as a stall of the gateway itself (SIGSTOP, a paused VM, a long
	// scheduler pause). A stall extends every local session's deadline by
	// its length, since the heartbeats sent meanwhile sit unread in socket
	// buffers. Smaller catches shorter stalls, but counts the ordinary
	// lateness of a loaded machine as stalls, each of which delays the expiry
	// of clients that really went silent by as much. Larger lets a stall up
	// to the threshold count as the clients' silence, which is harmless while
	// the threshold is below Timeout-Heartbeat: a shorter stall cannot expire
	// a client that heartbeats on time. Default max(Timeout/4,
	// 2*SweepInterval), at most Timeout/2, computed by Validate from the
	// final Timeout (DefaultConfig leaves it zero); negative disables stall
	// detection.
	StallThreshold time.Duration

	// MaxLineBytes is the longest request line accepted, newline excluded.
	// A longer line gets line_too_long and the connection is closed.
	// Default 64 KiB (protocol.MaxLineBytes).
	MaxLineBytes int

	// OutboundQueue is how many frames (replies, events, messages) may wait
	// for one connection's writer. A client that lets it fill is sent
	// slow_consumer and closed; nobody else ever waits for it. Messages
	// take at most half of it (more are not delivered), and a sub's initial
	// events do not count (they are paced by the client's own reading; see
	// backpressure.go). Default 1024.
	OutboundQueue int

	// OutboundQueueBytes bounds the bytes waiting in one connection's queue,
	// for the same purpose: it caps memory per slow client at roughly this
	// much. Must exceed MaxLineBytes. Default 4 MiB.
	OutboundQueueBytes int

	// GoroutineIO serves plain TCP clients with a reader goroutine per
	// connection (and a writer goroutine while frames are pending) instead
	// of the event loop, which on Linux reads every plain TCP client from
	// one epoll poller per CPU and holds no goroutine or read buffer per
	// idle connection (docs/performance.md). TLS and WebSocket clients are
	// always served by goroutines. Default false: the event loop on Linux;
	// other systems always use goroutines.
	GoroutineIO bool

	// IOUring has the event loop's pollers read their connections with
	// io_uring (a multishot receive per connection into a shared pool of
	// buffers, one io_uring_enter per round) instead of epoll_wait and a
	// read per readable connection (docs/performance.md). When the kernel
	// refuses io_uring (a seccomp profile such as Docker's default may), or
	// lacks what it needs (Linux 6.0 or later), the pollers use epoll, with
	// a warning. DefaultConfig sets true (the agent's default); false in a
	// Config built by hand. Ignored with GoroutineIO and on systems other
	// than Linux.
	IOUring bool

	// IOUringBatch is how long a poller in the io_uring mode, once a
	// round found input, waits for more before it handles what came
	// (up to 256 completions at once): fewer wakeups per heartbeat under
	// load, for up to this much delay on a request's reply. An idle
	// poller still wakes on the first input. 0: handle each wakeup's
	// input at once. DefaultConfig sets 200µs (DefaultIOUringBatch).
	IOUringBatch time.Duration

	// Pollers is the number of event-loop pollers. Each waits for its
	// connections in a blocking epoll_wait, which keeps its scheduler slot
	// (a P) while it waits; a process should run with at least one P more
	// than the node has pollers, so that goroutines woken meanwhile (the
	// gossip loop, the event notifier, timers, the HTTP and WebSocket
	// servers) get a P at once instead of when the runtime takes one back
	// from a waiting poller. `rollcall agent` does this
	// (cmd/rollcall/procs.go). Default: GOMAXPROCS at Start.
	Pollers int

	// MaxConnections caps the client connections held at once (sessions and
	// handshakes in progress). A connection past the cap is sent
	// "overloaded" and closed before it costs anything more, so a flood
	// cannot exhaust memory or file descriptors for the sessions already
	// here. Default 100,000; negative means no cap. Either way the node
	// holds no more than the open-file limit allows (FileLimit).
	MaxConnections int

	// FileLimit is the open-file limit the node's client connections must
	// fit under: MaxConnections is capped at ConnectionsForFileLimit
	// (FileLimit), which keeps FileReserve descriptors for listeners,
	// gossip, HTTP and files (fdlimit.go). Default (0): the process's
	// soft RLIMIT_NOFILE, read by New; negative: no cap from it.
	FileLimit int

	// WriteTimeout bounds one write to a client socket, of at most
	// OutboundQueueBytes. A client that does not read for this long while
	// the node has data for it is treated as a slow consumer. Default 10s.
	WriteTimeout time.Duration

	// EventCoalesce is the event-coalescing window, Nagle-style: a presence
	// change with no event flush in the last EventCoalesce is fanned out at
	// once, and the changes that follow within EventCoalesce of a flush
	// wait for that window's end and go out together: changes to one user
	// within the window produce one event with the final state, and a flap
	// within it that returns to the state last sent produces none. So an
	// isolated change waits for nothing, and under churn the node flushes
	// at most once per window. Larger saves work under churn, smaller
	// bounds the wait. Zero (or negative) disables the window: each change
	// flushes at once. DefaultConfig sets 1ms (DefaultEventCoalesce);
	// Validate leaves a zero as it is, so a Config not from DefaultConfig
	// has no window.
	EventCoalesce time.Duration

	// The status page at /ui/ on the HTTP endpoint (ui.go).

	// UIRecentEvents is how many recent presence changes the node keeps for
	// the status page, which shows them on load (a ring: the oldest is
	// overwritten, and counted). Each costs a few hundred bytes. Default
	// 200 (DefaultUIRecentEvents); negative turns the feed off: flushes do
	// no work for it and GET /v1/ui/events answers 404.
	UIRecentEvents int

	// UIStreamQueue is how many presence changes may wait for one
	// status-page stream (GET /v1/ui/events). A reader that lets it fill
	// misses the changes past it (they are counted, and the stream says how
	// many it missed); nothing else ever waits for it. Default 256.
	UIStreamQueue int

	// UIMaxStreams caps the status-page streams open at once; one more is
	// answered 503. Default 32.
	UIMaxStreams int

	// UIKeepAlive is how often an idle status-page stream gets a comment
	// line, so that proxies keep it open and the page can tell a quiet
	// stream from a dead one. Default 15s.
	UIKeepAlive time.Duration

	// UIAuth, when set, wraps the status page's data endpoints (every
	// handler Node.uiHandlers returns: /v1/ui/summary and /v1/ui/events)
	// in a further check of the embedding program's own. Those endpoints
	// always need what the node-wide read routes need (httpauth.go: the
	// admin token or a backend client token; open on a Dev node). The page
	// itself (/ui/) holds no data and is always served; it asks for a token
	// when a data endpoint answers 401. Default nil: no further check.
	UIAuth func(http.Handler) http.Handler

	// RouteTimeout bounds a send's routing to other gateways
	// (Cluster.Route), all of them concurrently. Default 2s.
	RouteTimeout time.Duration

	// SendRate is how many sends per second one session may make on
	// average, and SendBurst how many it may make at once after a quiet
	// spell (a token bucket per session). A send past the allowance gets
	// rate_limited, reaches nobody, and the connection stays open. Higher
	// suits bots that fan out to many users; lower bounds what one flooding
	// session costs the gateway and its recipients. Defaults 50/s and 100;
	// a negative SendRate disables the limit.
	SendRate  float64
	SendBurst int

	// MetaRate is how many meta requests per second one session may make
	// on average, and MetaBurst how many at once after a quiet spell (a
	// token bucket per session, apart from the send and request buckets).
	// A meta request past the allowance gets rate_limited and changes
	// nothing; the connection stays open. Defaults 2/s and 10; a negative
	// MetaRate disables the limit.
	MetaRate  float64
	MetaBurst int

	// Abuse limits past the send rate (limits.go); each may change while
	// the node runs (Node.SetLimits).
	//
	// RequestRate is how many requests per second one connection may make
	// on average, heartbeats included, and RequestBurst how many at once
	// after a quiet spell (a token bucket per connection, apart from the
	// send bucket). A request past the allowance gets rate_limited and is
	// not handled (a heartbeat past it does not refresh the deadline); the
	// connection stays open. The rate must allow MinRequestsPerHeartbeat
	// per Heartbeat, so a client heartbeating as told is never limited.
	// Defaults 100/s and 500; a negative RequestRate disables the limit.
	RequestRate  float64
	RequestBurst int

	// MaxSessionsPerUser caps the active sessions one user may hold,
	// counted in this node's projection (every gateway's sessions it has
	// heard of): a hello past it gets too_many_sessions and is closed,
	// unless it reconnects a (user, device) already active. Exact for the
	// hellos of one gateway, best effort across gateways (concurrent hellos
	// on two gateways may both pass). Default 100; negative means no cap.
	MaxSessionsPerUser int

	// MaxConnectionsPerIP caps the client connections one source address
	// holds at once on this gateway (sessions and handshakes in progress).
	// A connection past it is sent too_many_connections and closed at
	// accept, before it costs anything more, as with MaxConnections.
	// Default 10,000 (a large NAT; a load generator spreads over several
	// addresses); negative means no cap.
	MaxConnectionsPerIP int

	// UserHelloRate is how many hellos per second one user may make on
	// this gateway on average, and UserHelloBurst how many at once after a
	// quiet spell; IPHelloRate and IPHelloBurst the same per source
	// address (as MaxConnectionsPerIP counts them). A hello past either
	// gets rate_limited, opens nothing, and the connection stays open
	// (hellolimit.go). Defaults 10/s and 100 per user, 1,000/s and 10,000
	// per address; a negative rate disables the limit.
	UserHelloRate  float64
	UserHelloBurst int
	IPHelloRate    float64
	IPHelloBurst   int

	// TrackRate is how many sessions per second one connection may track
	// or untrack on average (each session of a track or untrack request
	// takes one token), and TrackBurst how many at once after a quiet
	// spell: a token bucket per connection, apart from the request bucket.
	// Each tracked session is a write every gateway merges, so a backend
	// that reconnects fills its sessions back at this pace. A request past
	// the allowance gets rate_limited, tracks nothing, and the connection
	// stays open. Defaults 10,000/s and 20,000 (at least
	// protocol.MaxTrackPerRequest); a negative TrackRate disables the
	// limit.
	TrackRate  float64
	TrackBurst int
	// MaxTrackedPerConnection caps the sessions one connection tracks at
	// once: a track that would take it past the cap gets bad_request and
	// tracks nothing. Default 100,000; negative means no cap.
	MaxTrackedPerConnection int

	// MaxTombstonesPerUser is passed to crdt.Config: the ended sessions
	// of one user the replica keeps for the tombstone horizon; past it
	// the oldest is collected at once. Default crdt's
	// DefaultMaxTombstonesPerUser (256); negative means no bound.
	MaxTombstonesPerUser int

	// LastSeenRetention is passed to crdt.Config: how long a user's last
	// seen (when the user's last session ended) is kept after that time,
	// apart from the session records, which go a tombstone horizon after
	// they end. Default 720h, 30 days (crdt.DefaultLastSeenRetention).
	LastSeenRetention time.Duration

	// GCInterval is how often the node collects crdt tombstones and purges
	// the sessions of long-dead gateways. Default 1m.
	GCInterval time.Duration

	// TombstoneHorizon is passed to crdt.Config: how long ended sessions
	// stay in the projection as tombstones. Zero takes crdt's default, 10m.
	TombstoneHorizon time.Duration

	// PurgeHorizon is passed to crdt.Config: how long the sessions of a
	// failed gateway stay in the projection (shown expired) before they are
	// purged. If the gateway is heard from later (a partition longer than
	// this healed), anti-entropy fetches its live sessions again. Longer
	// keeps a dead gateway's sessions visible longer; shorter frees them
	// sooner. Default 30m (crdt.DefaultPurgeHorizon).
	PurgeHorizon time.Duration

	// DrainTimeout bounds Serve's graceful shutdown when its context ends.
	// Default 10s.
	DrainTimeout time.Duration

	// Secret is the HS256 key that client tokens are signed with. Required
	// unless Dev. At least MinSecretBytes long.
	Secret []byte

	// TokenVerifier verifies client tokens, at hello and refresh and for
	// the HTTP API (Node.clientMayRead): its keys (HS256 secrets and
	// RS256, ES256, EdDSA public keys, by kid), the aud and iss it
	// requires and its leeway. Its Reload rotates keys while the node
	// runs. Set it or Secret, not both. Default nil: a verifier over
	// Secret alone (one HS256 key without a kid, auth.DefaultLeeway, aud
	// and iss not checked).
	TokenVerifier *auth.Verifier

	// Dev accepts any user without a token (hello's token is ignored) and
	// allows every session everything (auth.Unrestricted). For development
	// on loopback only; the node logs a loud warning.
	Dev bool

	// Logger receives the node's logs. Default: zap.NewNop().
	Logger *zap.Logger

	// Clock tells the time: session deadlines, expires_at, token expiry and
	// record timestamps. Tests inject a fake one. Default: the system clock.
	// Socket deadlines (handshake, writes) always use real time.
	Clock Clock

	// Incarnation is the incarnation this node writes as (crdt.Origin): it
	// must exceed every earlier incarnation of Name, or the cluster takes
	// this node's sessions for an old incarnation's and shows them offline.
	// The agent chooses it with gossip.NextIncarnation (the clock, the
	// --data-dir state file and what the cluster knows). Zero: the clock
	// at New, in Unix nanoseconds.
	Incarnation uint64

	// HTTPHandlers are extra routes mounted on the HTTP endpoint, by
	// http.ServeMux pattern (e.g. "GET /v1/members"): the agent adds the
	// cluster's routes here.
	HTTPHandlers map[string]http.Handler

	// Transport security and the admin API (see tls.go and httpauth.go).

	// TLS, when set, serves both the client port and the HTTP port over TLS
	// with this configuration: it must hold a certificate (Certificates,
	// GetCertificate or GetConfigForClient; a GetConfigForClient that
	// returns a new configuration per handshake rotates certificates without
	// a restart). TLS 1.2 is the minimum whatever MinVersion says. Set
	// ClientAuth and ClientCAs for mutual TLS. The handshake counts against
	// HandshakeTimeout on the client port. Default nil: plain TCP on both
	// ports (loopback, tests).
	TLS *tls.Config

	// AdminToken is the bearer token of the admin API: the routes of
	// AdminHTTPHandlers and /debug/pprof/, which answer only requests
	// carrying "Authorization: Bearer <AdminToken>"; it also reads every
	// read-only route. At least MinAdminTokenBytes long (see
	// ReadAdminTokenFile). Default empty: the admin routes answer 403,
	// unless Dev, which leaves them open to anyone.
	AdminToken []byte

	// ReadHTTPHandlers are extra read-only routes, like HTTPHandlers, that
	// reveal the cluster's state (the agent's GET /v1/members): a request
	// needs what httpReadAllowed asks (the admin token). Default none.
	ReadHTTPHandlers map[string]http.Handler

	// AdminHTTPHandlers are extra routes, like HTTPHandlers, that change
	// state or reveal secrets (the agent's POST /v1/leave, GET and POST
	// /v1/keys): they need AdminToken. Default none.
	AdminHTTPHandlers map[string]http.Handler

	// Cluster disseminates this node's writes and routes messages to other
	// gateways. Nil runs standalone; see also Node.SetCluster.
	Cluster Cluster

	// Rolling restarts and the address clients are told.

	// DrainGrace is how long Drain keeps the local sessions online after
	// telling their clients shutting_down, so a client that reconnects to
	// another gateway (with last_epoch) within it is never shown offline:
	// its newer session replaces the old one everywhere, and the old one is
	// never written disconnected. Sessions not taken over by then are
	// written disconnected and published when it ends; Drain ends it early
	// once every session is taken over. It applies only while the cluster
	// lists another live gateway (GatewayLister); otherwise sessions end at
	// once. Longer gives slow clients more time; every session not taken
	// over stays online that much longer. Must be below DrainTimeout.
	// Default 2s (DefaultDrainGrace); negative disables the hold.
	DrainGrace time.Duration

	// DisconnectGrace is how long the session of a connection that closes
	// without bye (the client's EOF, a reset, a failed write) stays
	// online: a reconnect of the same (user, device) within it, on any
	// gateway, takes the session over without an offline event anywhere;
	// otherwise the session is written disconnected when it ends. bye,
	// and the closes the gateway decides (slow_consumer, expired, ...),
	// end the session at once; a drain holds sessions for DrainGrace.
	// A held session still expires Timeout after its last request, so
	// a grace beyond Timeout is cut to it. Zero (or negative) ends
	// sessions at once. DefaultConfig sets
	// DefaultDisconnectGrace (5s); a Config not taken from it has none.
	DisconnectGrace time.Duration

	// ClientAdvertise is the client address this node tells clients and
	// other gateways (locate's gateway_addr for its own sessions; the
	// cluster layer publishes its own copy in the member metadata). Use it
	// when ClientAddr is not what clients can reach: a 0.0.0.0 bind, NAT, a
	// container. Default: the cluster's published address for this node
	// (see gossip.Config.ClientAddr), else the bound client address.
	ClientAdvertise string

	// Webhook configures the webhooks this node sends (webhook.go,
	// docs/webhooks.md); without URLs, none. DefaultConfig holds
	// webhook.DefaultConfig.
	Webhook webhook.Config
}

// Defaults.
const (
	DefaultClientAddr         = "127.0.0.1:7400"
	DefaultHeartbeat          = 5 * time.Second
	DefaultTimeout            = 15 * time.Second
	DefaultHandshakeTimeout   = 10 * time.Second
	DefaultOutboundQueue      = 1024
	DefaultOutboundQueueBytes = 4 << 20
	DefaultMaxConnections     = 100_000
	DefaultWriteTimeout       = 10 * time.Second
	DefaultEventCoalesce      = time.Millisecond
	DefaultIOUringBatch       = 200 * time.Microsecond
	DefaultRouteTimeout       = 2 * time.Second
	DefaultSendRate           = 50  // sends per second per session
	DefaultSendBurst          = 100 // sends at once per session
	DefaultGCInterval         = time.Minute
	DefaultDrainTimeout       = 10 * time.Second
	DefaultDrainGrace         = 2 * time.Second
	DefaultDisconnectGrace    = 5 * time.Second
	maxDefaultSweepInterval   = 250 * time.Millisecond
	minSweepInterval          = time.Millisecond
)

// DefaultConfig returns a Config with every default filled in except Secret
// (which has none), Dev (false), and SweepInterval and StallThreshold (zero:
// Validate derives them from the Timeout the caller settles on). It turns
// the io_uring mode on (IOUring), which falls back to epoll where the
// kernel refuses it.
func DefaultConfig() Config {
	c := Config{EventCoalesce: DefaultEventCoalesce, IOUring: true, IOUringBatch: DefaultIOUringBatch, DisconnectGrace: DefaultDisconnectGrace, Webhook: webhook.DefaultConfig()}
	_ = c.fill()
	c.SweepInterval, c.StallThreshold = 0, 0
	return c
}

// fill sets defaults on zero fields.
func (c *Config) fill() error {
	if c.Name == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("node: Config.Name empty and hostname unavailable: %w", err)
		}
		c.Name = h
	}
	if c.ClientAddr == "" {
		c.ClientAddr = DefaultClientAddr
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = DefaultHeartbeat
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if c.SweepInterval == 0 {
		c.SweepInterval = min(maxDefaultSweepInterval, max(c.Timeout/10, minSweepInterval))
	}
	if c.StallThreshold == 0 {
		c.StallThreshold = min(max(c.Timeout/4, 2*c.SweepInterval), c.Timeout/2)
	}
	if c.MaxLineBytes == 0 {
		c.MaxLineBytes = protocol.MaxLineBytes
	}
	if c.OutboundQueue == 0 {
		c.OutboundQueue = DefaultOutboundQueue
	}
	if c.MaxConnections == 0 {
		c.MaxConnections = DefaultMaxConnections
	}
	if c.OutboundQueueBytes == 0 {
		c.OutboundQueueBytes = DefaultOutboundQueueBytes
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = DefaultWriteTimeout
	}
	c.fillHTTP()
	if c.MaxTombstonesPerUser == 0 {
		c.MaxTombstonesPerUser = crdt.DefaultMaxTombstonesPerUser
	}
	c.fillUI()
	if c.RouteTimeout == 0 {
		c.RouteTimeout = DefaultRouteTimeout
	}
	if c.SendRate == 0 {
		c.SendRate = DefaultSendRate
	}
	if c.SendBurst == 0 {
		c.SendBurst = DefaultSendBurst
	}
	c.fillLimits()
	if c.PurgeHorizon == 0 {
		c.PurgeHorizon = crdt.DefaultPurgeHorizon
	}
	if c.LastSeenRetention == 0 {
		c.LastSeenRetention = crdt.DefaultLastSeenRetention
	}
	if c.GCInterval == 0 {
		c.GCInterval = DefaultGCInterval
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = DefaultDrainTimeout
	}
	if c.DrainGrace == 0 {
		c.DrainGrace = DefaultDrainGrace
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.Clock == nil {
		c.Clock = systemClock{}
	}
	return nil
}

// Validate fills defaults and rejects contradictions.
func (c *Config) Validate() error {
	if err := c.fill(); err != nil {
		return err
	}
	var errs []error
	if len(c.Name) > crdt.MaxNameLen {
		errs = append(errs, fmt.Errorf("name longer than %d bytes", crdt.MaxNameLen))
	}
	if c.Heartbeat < 0 || c.Timeout < 0 || c.HandshakeTimeout < 0 || c.SweepInterval < 0 ||
		c.WriteTimeout < 0 || c.RouteTimeout < 0 || c.GCInterval < 0 || c.DrainTimeout < 0 ||
		c.TombstoneHorizon < 0 || c.PurgeHorizon < 0 || c.LastSeenRetention < 0 || c.IOUringBatch < 0 {
		errs = append(errs, errors.New("durations must not be negative"))
	}
	if c.Timeout <= c.Heartbeat {
		errs = append(errs, fmt.Errorf("timeout (%v) must exceed heartbeat (%v)", c.Timeout, c.Heartbeat))
	}
	if c.SweepInterval > c.Timeout {
		errs = append(errs, fmt.Errorf("sweep interval (%v) must not exceed timeout (%v)", c.SweepInterval, c.Timeout))
	}
	if c.StallThreshold >= c.Timeout {
		errs = append(errs, fmt.Errorf("stall threshold (%v) must be below timeout (%v)", c.StallThreshold, c.Timeout))
	}
	if c.DrainGrace >= c.DrainTimeout {
		errs = append(errs, fmt.Errorf("drain grace (%v) must be below drain timeout (%v)", c.DrainGrace, c.DrainTimeout))
	}
	if err := c.Webhook.Validate(); err != nil {
		errs = append(errs, err)
	}
	if a := c.ClientAdvertise; a != "" {
		if host, port, err := net.SplitHostPort(a); err != nil || host == "" || port == "" {
			errs = append(errs, fmt.Errorf("client advertise address %q must be host:port", a))
		} else if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
			errs = append(errs, fmt.Errorf("client advertise address %q is unspecified: give an address clients can reach", a))
		}
	}
	if c.HTTPIdleTimeout < 0 || c.HTTPIdleTimeout > MaxHTTPIdleTimeout {
		errs = append(errs, fmt.Errorf("HTTP idle timeout (%v) must be positive and at most %v", c.HTTPIdleTimeout, MaxHTTPIdleTimeout))
	}
	if c.HTTPMaxHeaderBytes < minHTTPMaxHeaderBytes {
		errs = append(errs, fmt.Errorf("HTTP max header bytes (%d) must be at least %d", c.HTTPMaxHeaderBytes, minHTTPMaxHeaderBytes))
	}
	if c.IPv6PrefixBits < 1 || c.IPv6PrefixBits > 128 {
		errs = append(errs, fmt.Errorf("IPv6 prefix bits (%d) must be between 1 and 128", c.IPv6PrefixBits))
	}
	if c.MaxLineBytes < MinMaxLineBytes {
		errs = append(errs, fmt.Errorf("max line bytes must be at least %d", MinMaxLineBytes))
	}
	if err := c.validateUI(); err != nil {
		errs = append(errs, err)
	}
	if c.OutboundQueue < 1 {
		errs = append(errs, errors.New("outbound queue must be at least 1"))
	}
	if c.Pollers < 0 {
		errs = append(errs, errors.New("pollers must not be negative"))
	}
	limits := c.Limits()
	errs = append(errs, limits.validate(c.Heartbeat)...)
	if c.OutboundQueueBytes <= c.MaxLineBytes {
		errs = append(errs, fmt.Errorf("outbound queue bytes (%d) must exceed max line bytes (%d)", c.OutboundQueueBytes, c.MaxLineBytes))
	}
	if !c.Dev && len(c.Secret) == 0 && c.TokenVerifier == nil {
		errs = append(errs, errors.New("a secret or a token verifier is required unless Dev is set"))
	}
	if len(c.Secret) > 0 && c.TokenVerifier != nil {
		errs = append(errs, errors.New("set Secret or TokenVerifier, not both (give the secret to the verifier's Source)"))
	}
	if len(c.AdminToken) > 0 && len(c.AdminToken) < MinAdminTokenBytes {
		errs = append(errs, fmt.Errorf("admin token must be at least %d bytes", MinAdminTokenBytes))
	}
	if c.TLS != nil && len(c.TLS.Certificates) == 0 && c.TLS.GetCertificate == nil && c.TLS.GetConfigForClient == nil {
		errs = append(errs, errors.New("TLS config holds no certificate"))
	}
	if len(c.Secret) > 0 && len(c.Secret) < MinSecretBytes {
		errs = append(errs, fmt.Errorf("secret must be at least %d bytes", MinSecretBytes))
	}
	if len(errs) > 0 {
		return fmt.Errorf("node: invalid config: %w", errors.Join(errs...))
	}
	return nil
}

// Clock tells the time. Implementations must be safe for concurrent use.
// Now is on the heartbeat path, so it must not allocate.
type Clock interface {
	Now() time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }
