// Package redisgw is a presence gateway built the way teams build presence
// on Redis today, as a baseline to compare Rollcall against: each session
// is a key with a TTL that every heartbeat re-SETs (an epoch-guarded Lua
// compare-and-set, pipelined across connections), status changes are
// published over Redis pub/sub to every gateway, and sessions that time out
// go offline through Redis keyspace expiry notifications. Several gateways
// share one redis-server.
//
// It speaks the subset of Rollcall's client protocol (docs/protocol.md)
// that presence load needs: hello/welcome, hb (plain and with an id),
// status, sub, unsub, get and bye, with Rollcall's field names, so
// Rollcall's Go client and load generator run against it unchanged.
// Account settings, groups, locate, send and token refresh are not
// implemented and get bad_request.
package redisgw

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/rollcall/rollcall/protocol"
)

// Config configures a Gateway. Zero fields take the documented defaults.
type Config struct {
	// Name is the gateway's name in welcome and sessions. Default "redis-gw".
	Name string
	// Redis is the redis-server address. Default "127.0.0.1:6379".
	Redis string
	// DB is the Redis database. Default 0.
	DB int
	// Prefix is prepended to every key and channel. Default "rc:".
	Prefix string
	// Heartbeat is the interval told to clients. Default 5s.
	Heartbeat time.Duration
	// Timeout is a session's TTL after its last request. Default 15s.
	Timeout time.Duration
	// HandshakeTimeout bounds the time to hello. Default 10s.
	HandshakeTimeout time.Duration
	// MaxLineBytes bounds a request line. Default 64 KiB.
	MaxLineBytes int
	// Pipelines is how many heartbeat pipelines run at once. Default 4.
	Pipelines int
	// MaxBatch bounds the writes of one pipeline. Default 1024.
	MaxBatch int
	// Linger is how long the first write of a batch waits for others to
	// join it. Default 2ms.
	Linger time.Duration
	// Coalesce is how long presence changes are gathered before the
	// gateway reads them and sends events. Default 5ms.
	Coalesce time.Duration
	// OutboundQueue bounds the lines queued for one connection; a client
	// that falls further behind is dropped (slow_consumer). Default 1024.
	OutboundQueue int
	// SetNotify makes the gateway run CONFIG SET notify-keyspace-events Ex
	// at start, so that Redis reports expired keys. Default false (the
	// server is expected to run with it).
	SetNotify bool
	// Logger receives the gateway's log. Default: none.
	Logger *zap.Logger
}

func (c *Config) defaults() {
	if c.Name == "" {
		c.Name = "redis-gw"
	}
	if c.Redis == "" {
		c.Redis = "127.0.0.1:6379"
	}
	if c.Prefix == "" {
		c.Prefix = "rc:"
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = 5 * time.Second
	}
	if c.Timeout <= 0 {
		c.Timeout = 15 * time.Second
	}
	if c.HandshakeTimeout <= 0 {
		c.HandshakeTimeout = 10 * time.Second
	}
	if c.MaxLineBytes <= 0 {
		c.MaxLineBytes = 64 << 10
	}
	if c.Pipelines <= 0 {
		c.Pipelines = 4
	}
	if c.MaxBatch <= 0 {
		c.MaxBatch = 1024
	}
	if c.Linger <= 0 {
		c.Linger = 2 * time.Millisecond
	}
	if c.Coalesce <= 0 {
		c.Coalesce = 5 * time.Millisecond
	}
	if c.OutboundQueue <= 0 {
		c.OutboundQueue = 1024
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
}

// Gateway is one baseline gateway.
type Gateway struct {
	cfg     Config
	log     *zap.Logger
	rdb     *redis.Client
	st      *store
	ln      net.Listener
	writes  chan *writeReq
	batches chan []*writeReq

	version atomic.Uint64 // last presence version issued

	mu    sync.Mutex
	conns map[*conn]struct{}
	subs  map[string]map[*conn]struct{} // user -> subscribed connections

	dirtyMu sync.Mutex
	dirty   map[string]struct{}
	wake    chan struct{}

	// Counters, read by Stats.
	heartbeats atomic.Uint64
	pipelines  atomic.Uint64
	events     atomic.Uint64

	wg sync.WaitGroup
}

// Stats are the gateway's counters.
type Stats struct {
	Sessions   int    // connections past hello
	Heartbeats uint64 // session writes (heartbeats, status, closes) sent to Redis
	Pipelines  uint64 // pipelines executed
	Events     uint64 // events queued to clients
}

// New connects to Redis, loads the scripts and listens on addr. Serve
// runs the gateway.
func New(ctx context.Context, addr string, cfg Config) (*Gateway, error) {
	cfg.defaults()
	rdb := redis.NewClient(&redis.Options{Addr: cfg.Redis, DB: cfg.DB,
		PoolSize: 4*cfg.Pipelines + 16})
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("redis %s: %w", cfg.Redis, err)
	}
	if cfg.SetNotify {
		if err := rdb.ConfigSet(ctx, "notify-keyspace-events", "Ex").Err(); err != nil {
			rdb.Close()
			return nil, fmt.Errorf("redis: enabling expiry notifications: %w", err)
		}
	}
	st := newStore(rdb, cfg.Prefix, cfg.DB)
	if err := st.load(ctx); err != nil {
		rdb.Close()
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		rdb.Close()
		return nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	return &Gateway{cfg: cfg, log: cfg.Logger, rdb: rdb, st: st, ln: ln,
		writes:  make(chan *writeReq, 4*cfg.MaxBatch*cfg.Pipelines),
		batches: make(chan []*writeReq, cfg.Pipelines),
		conns:   map[*conn]struct{}{}, subs: map[string]map[*conn]struct{}{},
		dirty: map[string]struct{}{}, wake: make(chan struct{}, 1)}, nil
}

// Addr is the client address the gateway listens on.
func (g *Gateway) Addr() net.Addr { return g.ln.Addr() }

// Stats returns the gateway's counters.
func (g *Gateway) Stats() Stats {
	g.mu.Lock()
	n := len(g.conns)
	g.mu.Unlock()
	return Stats{Sessions: n, Heartbeats: g.heartbeats.Load(), Pipelines: g.pipelines.Load(), Events: g.events.Load()}
}

// Serve runs the gateway until ctx ends; then it closes every connection
// (their sessions end as clean disconnects) and returns.
func (g *Gateway) Serve(ctx context.Context) error {
	// Connections end when ctx does; the pipelines, fan-out and Redis
	// stay until their sessions are cleaned up.
	bgCtx, bgCancel := context.WithCancel(context.WithoutCancel(ctx))
	defer bgCancel()
	ps := g.rdb.Subscribe(bgCtx, g.st.channel, g.st.expired)
	if _, err := ps.Receive(bgCtx); err != nil {
		g.ln.Close()
		g.rdb.Close()
		return fmt.Errorf("redis subscribe: %w", err)
	}
	var bg sync.WaitGroup
	bg.Go(func() { g.collect(bgCtx) })
	for range g.cfg.Pipelines {
		bg.Go(func() { g.pipeline(bgCtx) })
	}
	bg.Go(func() { g.notifications(bgCtx, ps) })
	bg.Go(func() { g.fanout(bgCtx) })
	bg.Go(func() { g.sweep(bgCtx) })
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	context.AfterFunc(ctx, func() { g.ln.Close() })
	g.log.Info("redis baseline gateway started", zap.String("name", g.cfg.Name),
		zap.String("addr", g.ln.Addr().String()), zap.String("redis", g.cfg.Redis))
	var err error
	for {
		c, aerr := g.ln.Accept()
		if aerr != nil {
			if ctx.Err() == nil {
				err = fmt.Errorf("accept: %w", aerr)
			}
			break
		}
		g.wg.Go(func() { g.serveConn(ctx, c) })
	}
	// every connection gets shutting_down (serveConn) and ends
	cancel()
	g.wg.Wait()
	bgCancel()
	ps.Close()
	bg.Wait()
	g.rdb.Close()
	return err
}

// nextVersion is a presence version: gateway clock in microseconds,
// strictly increasing.
func (g *Gateway) nextVersion() uint64 {
	for {
		old := g.version.Load()
		v := max(old+1, uint64(time.Now().UnixMicro()))
		if g.version.CompareAndSwap(old, v) {
			return v
		}
	}
}

// writeReq is one epoch-guarded session write for a pipeline.
type writeReq struct {
	c       *conn
	val     string
	publish bool
	del     bool  // a clean disconnect: delete the key
	ok      bool  // written (false: superseded)
	err     error // Redis failed
	done    chan struct{}
}

// collect gathers the queued writes of all connections into batches:
// from the first write, for Linger or until MaxBatch.
func (g *Gateway) collect(ctx context.Context) {
	for {
		var first *writeReq
		select {
		case <-ctx.Done():
			return
		case first = <-g.writes:
		}
		batch := make([]*writeReq, 1, g.cfg.MaxBatch)
		batch[0] = first
		t := time.NewTimer(g.cfg.Linger)
	fill:
		for len(batch) < g.cfg.MaxBatch {
			select {
			case r := <-g.writes:
				batch = append(batch, r)
			case <-t.C:
				break fill
			}
		}
		t.Stop()
		select {
		case g.batches <- batch:
		case <-ctx.Done():
			return
		}
	}
}

// pipeline executes batches, one pipeline at a time.
func (g *Gateway) pipeline(ctx context.Context) {
	cmds := make([]*redis.Cmd, 0, g.cfg.MaxBatch)
	ttl := g.cfg.Timeout.Milliseconds()
	for {
		var batch []*writeReq
		select {
		case <-ctx.Done():
			return
		case batch = <-g.batches:
		}
		p := g.rdb.Pipeline()
		cmds = cmds[:0]
		for _, r := range batch {
			if r.del {
				cmds = append(cmds, g.st.closeCmd(ctx, p, r.c.user, r.c.device, r.c.epoch))
				continue
			}
			cmds = append(cmds, g.st.writeCmd(ctx, p, r.c.user, r.c.device, r.c.epoch, r.val, ttl, r.publish))
		}
		_, _ = p.Exec(ctx) // each command carries its own error
		g.pipelines.Add(1)
		g.heartbeats.Add(uint64(len(batch)))
		for i, r := range batch {
			n, err := cmds[i].Int64()
			if r.del {
				if isNoScript(err) {
					err = g.st.close(ctx, r.c.user, r.c.device, r.c.epoch)
				}
				r.err, r.ok = err, err == nil
				close(r.done)
				continue
			}
			if isNoScript(err) { // the server lost the scripts (restarted)
				var ok bool
				ok, err = g.st.write(ctx, r.c.user, r.c.device, r.c.epoch, r.val, ttl, r.publish)
				if ok {
					n = 1
				}
			}
			r.err = err
			r.ok = err == nil && n == 1
			close(r.done)
			if err == nil && !r.ok {
				r.c.supersede()
			}
		}
	}
}

// notifications marks users dirty from the presence channel and from
// expired session keys.
func (g *Gateway) notifications(ctx context.Context, ps *redis.PubSub) {
	ch := ps.Channel(redis.WithChannelSize(4096))
	for {
		select {
		case <-ctx.Done():
			return
		case m, ok := <-ch:
			if !ok {
				return
			}
			user := m.Payload
			if m.Channel == g.st.expired {
				u, ok := g.st.userOfKey(m.Payload)
				if !ok {
					continue
				}
				user = u
			}
			g.markDirty(user)
		}
	}
}

func (g *Gateway) markDirty(user string) {
	g.mu.Lock()
	_, watched := g.subs[user]
	g.mu.Unlock()
	if !watched {
		return
	}
	g.dirtyMu.Lock()
	g.dirty[user] = struct{}{}
	g.dirtyMu.Unlock()
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// fanout reads the presence of changed users, a coalescing window after
// the first change, and sends events to their subscribers.
func (g *Gateway) fanout(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-g.wake:
		}
		t := time.NewTimer(g.cfg.Coalesce)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		g.dirtyMu.Lock()
		users := make([]string, 0, len(g.dirty))
		for u := range g.dirty {
			users = append(users, u)
		}
		clear(g.dirty)
		g.dirtyMu.Unlock()
		for len(users) > 0 {
			n := min(len(users), g.cfg.MaxBatch)
			g.sendEvents(ctx, users[:n], nil)
			users = users[n:]
		}
	}
}

// sendEvents reads users' presence and queues an event for each to its
// subscribers, or only to c when c is not nil.
func (g *Gateway) sendEvents(ctx context.Context, users []string, only *conn) {
	sts, err := g.st.presences(ctx, users)
	if err != nil {
		if ctx.Err() == nil {
			g.log.Warn("reading presence", zap.Error(err))
		}
		return
	}
	for i, u := range users {
		line := eventLine(u, sts[i], g.nextVersion())
		if only != nil {
			only.push(line)
			g.events.Add(1)
			continue
		}
		g.mu.Lock()
		targets := make([]*conn, 0, len(g.subs[u]))
		for c := range g.subs[u] {
			targets = append(targets, c)
		}
		g.mu.Unlock()
		for _, c := range targets {
			c.push(line)
		}
		g.events.Add(uint64(len(targets)))
	}
}

// sweep expires connections that sent nothing for the timeout. Their
// Redis keys time out by themselves, and the expiry notification tells
// every gateway.
func (g *Gateway) sweep(ctx context.Context) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			g.mu.Lock()
			var late []*conn
			for c := range g.conns {
				if now.UnixNano() > c.deadline.Load() {
					late = append(late, c)
				}
			}
			g.mu.Unlock()
			for _, c := range late {
				c.fail(protocol.CodeExpired, fmt.Sprintf("no request for %v", g.cfg.Timeout), nil)
			}
		}
	}
}
