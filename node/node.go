package node

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/coder/websocket"

	"github.com/rollcall/rollcall/auth"
	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/protocol"
)

// Node is one Rollcall gateway. Create it with New, optionally attach a
// Cluster, Start it (or Serve), and Drain then Close it. Its Host methods
// (host.go, what gossip.Host asks for) may be called by the cluster layer
// from any goroutine, before or after Start.
//
// Locking: mu guards the replica and every index below it. Two further locks
// only order work handed off from under mu, and are taken while mu is held,
// never the other way round: pubMu orders Cluster.Publish calls by write
// order, fanMu orders event delivery by version order. Neither Cluster
// methods nor connection queues are ever called with mu held.
type Node struct {
	// Static after New.
	cfg    Config
	log    *zap.Logger
	clock  Clock
	origin crdt.Origin
	base   time.Time // deadlines are monotonic nanoseconds since base
	wheel  *wheel
	tls    *tls.Config    // the listeners' TLS configuration (serverTLS(cfg.TLS)); nil serves plain TCP
	tokens *auth.Verifier // nil only on a --dev gateway without keys

	// The open-file limit (Config.FileLimit, resolved; 0: none known) and
	// the cap it puts on MaxConnections (ConnectionsForFileLimit; -1:
	// none). Static after New.
	files, fileConns int

	// stallNow reads the real monotonic clock for the sweeper's stall
	// detector (nanoseconds since New). Tests in this package replace it
	// before Start.
	stallNow func() int64
	// eventAfter waits out the rest of an event-coalescing window
	// (notifyLoop); tests in this package replace it before Start.
	eventAfter func(time.Duration) <-chan time.Time
	// requestHook, when set, sees every request before dispatch handles
	// it (on the connection's reader); tests in this package set it before
	// Start, to inject a panic.
	requestHook func(*protocol.Request)
	// lockedHook, when set, sees requests where their handlers hold mu
	// (underLockHook); tests in this package set it before Start, to
	// inject a panic under the lock.
	lockedHook func(*protocol.Request)
	// pageHook, when set, runs before each page of a sub's snapshot is
	// read (sendSnapshotPages), on the connection's reader; tests in this
	// package set it before Start.
	pageHook func()

	// Written by the sweeper, read anywhere.
	stalled atomic.Int64  // nanoseconds of gateway stalls detected; mono subtracts them
	sweeps  atomic.Uint64 // sweeps done (tests wait on it)

	cluster atomic.Pointer[clusterRef]

	// The live limits: read anywhere, replaced whole by SetLimits (which
	// limitsMu serializes).
	limits   atomic.Pointer[Limits]
	limitsMu sync.Mutex

	// Guarded by mu.
	mu         sync.Mutex
	replica    *crdt.Replica
	local      map[string]map[string]*conn // user -> device -> conn owning that active session
	localCount int
	tracked    map[crdt.Key]*trackedSession // sessions connections hold on behalf of users (track.go)
	conns      map[*conn]struct{}           // every open connection
	perIP      map[netip.Addr]int           // open connections by source address (sourceKey): client and HTTP
	httpConns  int                          // open HTTP connections (httpconns.go)
	draining   bool
	holding    bool                  // Drain holds the local sessions for DrainGrace (drain.go)
	version    uint64                // last presence version handed out
	dirty      map[string]struct{}   // users whose presence may have changed since the last flush
	users      map[string]*userWatch // users someone watches, directly or through a group
	groups     map[string]*groupWatch
	feedLast   map[string]feedLast // the feed's view of each online user; nil when the feed is off
	changes    changeLog           // recently dirty users by version, for event streams' resume (events.go)
	lapses     lapseQueue          // users whose account's until is to come (status.go)

	pubMu sync.Mutex // orders Publish calls; see the type comment
	fanMu sync.Mutex // orders event delivery; see the type comment

	notify chan struct{} // cap 1: dirty users are waiting for the notifier
	// handedOver (cap 1) is signalled when the last local session held by
	// Drain is gone (taken over by a newer epoch elsewhere, or expired).
	handedOver chan struct{}

	// Lifecycle.
	startOnce sync.Once
	started   atomic.Bool
	closeOnce sync.Once
	done      chan struct{} // closed by Close: background loops stop
	loops     sync.WaitGroup
	connWG    sync.WaitGroup // one per connection (its reader side), one per writer and paused reader goroutine
	// polls is the event loop serving plain TCP clients (netpoll_linux.go);
	// nil when goroutines serve them (TLS, Config.GoroutineIO, not Linux).
	polls    *pollerSet
	nextConn atomic.Uint64
	ln       net.Listener
	httpLn   net.Listener
	httpSrv  *http.Server
	wsAccept *websocket.AcceptOptions // GET /ws's upgrade options (ws.go)
	wsLn     net.Listener             // Config.WSAddr's, or nil
	wsSrv    *http.Server
	drained  chan struct{} // closed when Drain has run

	stats counters

	// The status page (ui.go): static after New; feed is nil when
	// Config.UIRecentEvents is negative.
	feed    *feed
	uiCache uiSummaryCache

	streams eventStreams // GET /v1/events (events.go)

	hellos   *helloLimiter // hello rates by user and source (hellolimit.go); static after New
	apiLimit *apiLimiter   // backend API request rates by source (apilimit.go); static after New

	hooks *webhooks // webhook.go; nil when Config.Webhook has no URLs; static after New
}

type clusterRef struct{ c Cluster }

// New validates cfg and returns a node that has not started yet.
func New(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	now := cfg.Clock.Now()
	origin := crdt.Origin{Node: cfg.Name, Incarnation: cfg.Incarnation}
	if origin.Incarnation == 0 {
		origin.Incarnation = uint64(now.UnixNano())
	}
	r, err := crdt.NewReplica(crdt.Config{
		Self:             origin,
		TombstoneHorizon: cfg.TombstoneHorizon,
		PurgeHorizon:     cfg.PurgeHorizon,

		MaxTombstonesPerUser: cfg.MaxTombstonesPerUser,
		LastSeenRetention:    cfg.LastSeenRetention,
	})
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	tokens, err := newTokenVerifier(cfg)
	if err != nil {
		return nil, err
	}
	n := &Node{
		tokens:     tokens,
		cfg:        cfg,
		log:        cfg.Logger.With(zap.String("node", cfg.Name)),
		clock:      cfg.Clock,
		origin:     origin,
		base:       now,
		tls:        serverTLS(cfg.TLS),
		replica:    r,
		local:      make(map[string]map[string]*conn),
		tracked:    make(map[crdt.Key]*trackedSession),
		conns:      make(map[*conn]struct{}),
		perIP:      make(map[netip.Addr]int),
		dirty:      make(map[string]struct{}),
		users:      make(map[string]*userWatch),
		groups:     make(map[string]*groupWatch),
		notify:     make(chan struct{}, 1),
		done:       make(chan struct{}),
		drained:    make(chan struct{}),
		handedOver: make(chan struct{}, 1),
		hellos:     newHelloLimiter(),
		apiLimit:   newAPILimiter(),
	}
	n.initEventStreams()
	if cfg.Webhook.Enabled() {
		if n.hooks, err = newWebhooks(cfg, n.log); err != nil {
			return nil, fmt.Errorf("node: %w", err)
		}
	}
	limits := cfg.Limits()
	n.limits.Store(&limits)
	n.files = cfg.fileLimit()
	n.fileConns = ConnectionsForFileLimit(n.files)
	n.wheel = newWheel(int64(cfg.SweepInterval), int64(cfg.Timeout), 0)
	start := time.Now()
	n.stallNow = func() int64 { return int64(time.Since(start)) }
	n.eventAfter = time.After
	if cfg.UIRecentEvents >= 0 {
		n.feed = newFeed(cfg.UIRecentEvents, cfg.UIStreamQueue, cfg.UIMaxStreams)
		n.feedLast = make(map[string]feedLast)
	}
	if cfg.Cluster != nil {
		n.SetCluster(cfg.Cluster)
	}
	return n, nil
}

// Name returns the node's name, the gateway name clients and peers see.
func (n *Node) Name() string { return n.cfg.Name }

// Origin returns the crdt origin this node writes as: its name and
// Config.Incarnation (by default the clock at New, in nanoseconds).
func (n *Node) Origin() crdt.Origin { return n.origin }

// Config returns the node's validated configuration, with the limits it
// enforces now (SetLimits may have changed them since New).
func (n *Node) Config() Config {
	c := n.cfg
	c.setLimits(n.Limits())
	return c
}

// SetCluster attaches the cluster layer. Call it before Start; a nil c runs
// standalone. It is safe to call at any time, but writes made before it are
// not published (anti-entropy repairs them).
func (n *Node) SetCluster(c Cluster) {
	if c == nil {
		n.cluster.Store(nil)
		return
	}
	n.cluster.Store(&clusterRef{c})
}

func (n *Node) getCluster() Cluster {
	if ref := n.cluster.Load(); ref != nil {
		return ref.c
	}
	return nil
}

// mono returns the node's deadline clock: the time since the node started,
// less the stalls of the gateway itself the sweeper has detected, in
// nanoseconds. It stops while the gateway is stalled, so a stall extends
// every session's deadline by its length (see sweepLoop). It is on the
// heartbeat path: one clock read and one atomic load.
func (n *Node) mono() int64 { return n.monoAt(n.clock.Now()) }

// monoAt is mono at clock time now: code that also uses now (a record's
// ExpiresAt, a reply's expires_at) reads the clock once and converts.
func (n *Node) monoAt(now time.Time) int64 {
	return int64(now.Sub(n.base)) - n.stalled.Load()
}

// Start binds the client (and HTTP, when configured) listeners and starts
// the accept loops, the expiry sweeper, the event notifier and crdt GC.
func (n *Node) Start() error {
	var err error
	n.startOnce.Do(func() { err = n.start() })
	return err
}

func (n *Node) start() error {
	ln, err := net.Listen("tcp", n.cfg.ClientAddr)
	if err != nil {
		return fmt.Errorf("node: listen for clients on %s: %w", n.cfg.ClientAddr, err)
	}
	n.ln = ln
	n.wsAccept = n.wsAcceptOptions()
	if n.cfg.HTTPAddr != "" {
		hl, err := net.Listen("tcp", n.cfg.HTTPAddr)
		if err != nil {
			ln.Close()
			return fmt.Errorf("node: listen for HTTP on %s: %w", n.cfg.HTTPAddr, err)
		}
		n.httpLn = hl
		// HTTPReadHeaderTimeout also bounds the TLS handshake (net/http
		// runs it on the connection's goroutine, not the accept loop).
		n.httpSrv = n.newHTTPServer(n.httpHandler())
		served := n.httpListener(hl)
		n.loops.Add(1)
		go func() {
			defer n.loops.Done()
			if err := n.httpSrv.Serve(served); err != nil && !errors.Is(err, http.ErrServerClosed) {
				n.log.Error("http server stopped", zap.Error(err))
			}
		}()
	}
	if err := n.startWS(); err != nil {
		ln.Close()
		if n.httpSrv != nil {
			n.httpSrv.Close()
		}
		return err
	}
	if n.cfg.Dev {
		n.log.Warn("DEV MODE: clients are NOT authenticated; any user may connect as anyone. Never run this in production.")
		if n.httpLn != nil && len(n.cfg.AdminToken) == 0 {
			n.log.Warn("DEV MODE: the admin API (POST /v1/leave, /v1/keys, /debug/pprof) is open to anyone who reaches the HTTP port; give an admin token to close it")
		}
	}
	if (n.httpLn != nil || n.wsLn != nil) && n.wsAccept.InsecureSkipVerify {
		n.log.Warn("WebSocket (GET /ws) accepts every origin: any web page can open sessions through a visitor's browser; list the allowed origins (--ws-allowed-origins) in production")
	}
	if n.tls == nil {
		if n.polls, err = n.startPollers(); err != nil {
			ln.Close()
			if n.httpSrv != nil {
				n.httpSrv.Close()
			}
			if n.wsSrv != nil {
				n.wsSrv.Close()
			}
			return err
		}
	}
	n.started.Store(true)
	n.loops.Add(4)
	// The spare descriptor is taken before Start returns, so a process
	// that runs out of descriptors right after still has it.
	go n.acceptLoop(ln, openSpareFD())
	go n.sweepLoop()
	go n.notifyLoop()
	go n.gcLoop()
	n.startWebhooks()
	n.log.Info("gateway started",
		zap.Stringer("client_addr", ln.Addr()),
		zap.String("http_addr", n.addrString(n.httpLn)),
		zap.String("ws_addr", n.addrString(n.wsLn)),
		zap.Bool("tls", n.tls != nil),
		zap.Duration("heartbeat", n.cfg.Heartbeat),
		zap.Duration("timeout", n.cfg.Timeout),
		zap.Stringer("origin", n.origin))
	return nil
}

func (n *Node) addrString(l net.Listener) string {
	if l == nil {
		return ""
	}
	return l.Addr().String()
}

// ClientAddr returns the bound client address, or nil before Start.
func (n *Node) ClientAddr() net.Addr {
	if n.ln == nil {
		return nil
	}
	return n.ln.Addr()
}

// HTTPAddr returns the bound HTTP address, or nil when HTTP is disabled or
// before Start.
func (n *Node) HTTPAddr() net.Addr {
	if n.httpLn == nil {
		return nil
	}
	return n.httpLn.Addr()
}

// Serve starts the node if needed, blocks until ctx is done, then drains it
// within Config.DrainTimeout. It does not Close the node, so the cluster
// layer can still flush and leave; call Close after that.
func (n *Node) Serve(ctx context.Context) error {
	if err := n.Start(); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-n.done:
		return nil
	}
	dctx, cancel := context.WithTimeout(context.Background(), n.cfg.DrainTimeout)
	defer cancel()
	return n.Drain(dctx)
}

// Close stops the node at once: listeners, connections (without writing
// their sessions; Drain first for that), HTTP and background loops. The
// replica stays readable through the Host methods.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		close(n.done)
		if n.ln != nil {
			n.ln.Close()
		}
		n.stopFeed()
		n.stopEventStreams()
		if n.httpSrv != nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			n.httpSrv.Shutdown(ctx) //nolint:errcheck // best effort; Close follows
			cancel()
			n.httpSrv.Close()
		}
		if n.wsSrv != nil {
			n.wsSrv.Close() // its WebSockets are hijacked: aborted below
		}
		n.mu.Lock()
		conns := make([]*conn, 0, len(n.conns))
		for c := range n.conns {
			conns = append(conns, c)
		}
		n.mu.Unlock()
		for _, c := range conns {
			c.abort()
		}
		n.connWG.Wait()
		n.polls.close()
		n.loops.Wait()
		n.closeWebhooks()
	})
	return nil
}

// unlockAndPublish releases mu, held by lk, then publishes deltas (in the
// order they were written: pubMu is taken before mu is released) and wakes
// the notifier if presence changes are pending.
func (n *Node) unlockAndPublish(lk *held, deltas []crdt.Delta) {
	wake := len(n.dirty) > 0
	if len(deltas) == 0 {
		lk.unlock()
	} else {
		pk := lockOf(&n.pubMu)
		defer pk.unlock()
		lk.unlock()
		if c := n.getCluster(); c != nil {
			c.Publish(deltas)
		}
		pk.unlock()
		n.stats.published.Add(uint64(len(deltas)))
	}
	if wake {
		select {
		case n.notify <- struct{}{}:
		default:
		}
	}
}

// gcLoop collects crdt tombstones and purges dead gateways' sessions.
func (n *Node) gcLoop() {
	defer n.loops.Done()
	t := time.NewTicker(n.cfg.GCInterval)
	defer t.Stop()
	for {
		select {
		case <-n.done:
			return
		case <-t.C:
		}
		n.mu.Lock()
		st := n.replica.GC(n.clock.Now().UnixNano())
		n.mu.Unlock()
		n.pruneHellos(n.mono())
		n.apiLimit.prune(n.mono(), n.limits.Load())
		if st.Tombstones > 0 || st.Purged > 0 {
			n.log.Debug("crdt gc", zap.Int("tombstones", st.Tombstones), zap.Int("purged", st.Purged))
		}
	}
}
