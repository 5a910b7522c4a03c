package node

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/protocol"
)

// Abuse limits. Each protects the sessions already on a gateway from one
// client, user or host that asks for too much; over a limit, the one asking
// gets a clear error code and everyone else keeps being served:
//
//	per connection  RequestRate/RequestBurst   rate_limited (stays open)
//	                TrackRate/TrackBurst       rate_limited (stays open), per
//	                                           session tracked or untracked
//	                MaxTrackedPerConnection    bad_request at track (stays open)
//	per session     SendRate/SendBurst         rate_limited (stays open)
//	                MetaRate/MetaBurst         rate_limited (stays open)
//	per user        MaxSessionsPerUser         too_many_sessions (closes)
//	                UserHelloRate/Burst        rate_limited at hello (stays open)
//	per source IP   MaxConnectionsPerIP        too_many_connections (closes)
//	                IPHelloRate/Burst          rate_limited at hello (stays open)
//	per gateway     MaxConnections             overloaded (closes)
//
// A source IP is an IPv4 address or an IPv6 /IPv6PrefixBits network
// (sourceKey); the HTTP port's bounds are in httpconns.go.
//
// They are on by default, with defaults generous enough for NAT'd offices,
// bots and load generators (docs/operations/configuration.md, "Limits"), and they can
// change while the node runs (SetLimits) without dropping anyone.

// Default limits.
const (
	// DefaultRequestRate is the requests per second one connection may
	// make on average, heartbeats included: 500 per heartbeat interval at
	// the default 5s, far above what any client needs, low enough that
	// one connection cannot keep a core busy or flood the cluster with
	// writes.
	DefaultRequestRate = 100
	// DefaultRequestBurst is the requests one connection may make at once
	// after a quiet spell: room for a reconnecting client to replay its
	// state (a hello, MaxGroups joins, subs, gets) without waiting.
	DefaultRequestBurst = 500
	// DefaultMetaRate is the meta requests per second one session may
	// make on average, and DefaultMetaBurst how many at once: each is a
	// write every gateway of the cluster merges and every subscriber of
	// the user is told of, so a client that updates its meta at each
	// keystroke is held to a few per second.
	DefaultMetaRate  = 2
	DefaultMetaBurst = 10
	// DefaultMaxSessionsPerUser is the active sessions one user may hold
	// across the cluster: far more devices and tabs than a person has,
	// few enough that one stolen or buggy token cannot fill a gateway.
	DefaultMaxSessionsPerUser = 100
	// DefaultMaxConnectionsPerIP is the connections one source address may
	// hold on one gateway: above a large office or a carrier-grade NAT
	// behind one address, a tenth of DefaultMaxConnections, so a single
	// host cannot take a gateway's every slot.
	DefaultMaxConnectionsPerIP = 10_000
	// DefaultTrackRate is the sessions per second one connection may
	// track or untrack on average, and DefaultTrackBurst how many at once:
	// a backend that reconnects tracks 100,000 users again in about ten
	// seconds, and no one connection can make the cluster merge more
	// writes than that.
	DefaultTrackRate  = 10_000
	DefaultTrackBurst = 20_000
	// DefaultMaxTrackedPerConnection is the sessions one connection may
	// track at once.
	DefaultMaxTrackedPerConnection = 100_000

	// MinMaxLineBytes is the smallest MaxLineBytes a Config accepts.
	MinMaxLineBytes = 1 << 10

	// MinRequestsPerHeartbeat is the fewest requests per heartbeat
	// interval a RequestRate may allow: a client that heartbeats as told,
	// or a few times as often, must never be limited.
	MinRequestsPerHeartbeat = 4
)

// Limits are the node's limits that may change while it runs (SetLimits).
// Their meaning and defaults are those of the Config fields of the same
// names; a zero field takes the default, and a negative rate or cap
// disables it.
type Limits struct {
	RequestRate         float64
	RequestBurst        int
	SendRate            float64
	SendBurst           int
	MetaRate            float64
	MetaBurst           int
	MaxConnections      int
	MaxConnectionsPerIP int
	MaxSessionsPerUser  int
	UserHelloRate       float64
	UserHelloBurst      int
	IPHelloRate         float64
	IPHelloBurst        int
	TrackRate           float64
	TrackBurst          int
	// MaxTrackedPerConnection: negative means no cap.
	MaxTrackedPerConnection int
}

// Limits returns the limits of c (before Validate, zero fields are zero).
func (c Config) Limits() Limits {
	return Limits{
		RequestRate: c.RequestRate, RequestBurst: c.RequestBurst,
		SendRate: c.SendRate, SendBurst: c.SendBurst,
		MetaRate: c.MetaRate, MetaBurst: c.MetaBurst,
		MaxConnections: c.MaxConnections, MaxConnectionsPerIP: c.MaxConnectionsPerIP,
		MaxSessionsPerUser: c.MaxSessionsPerUser,
		UserHelloRate:      c.UserHelloRate, UserHelloBurst: c.UserHelloBurst,
		IPHelloRate: c.IPHelloRate, IPHelloBurst: c.IPHelloBurst,
		TrackRate: c.TrackRate, TrackBurst: c.TrackBurst, MaxTrackedPerConnection: c.MaxTrackedPerConnection,
	}
}

// setLimits copies l into c's fields.
func (c *Config) setLimits(l Limits) {
	c.RequestRate, c.RequestBurst = l.RequestRate, l.RequestBurst
	c.SendRate, c.SendBurst = l.SendRate, l.SendBurst
	c.MetaRate, c.MetaBurst = l.MetaRate, l.MetaBurst
	c.MaxConnections, c.MaxConnectionsPerIP = l.MaxConnections, l.MaxConnectionsPerIP
	c.MaxSessionsPerUser = l.MaxSessionsPerUser
	c.UserHelloRate, c.UserHelloBurst = l.UserHelloRate, l.UserHelloBurst
	c.IPHelloRate, c.IPHelloBurst = l.IPHelloRate, l.IPHelloBurst
	c.TrackRate, c.TrackBurst, c.MaxTrackedPerConnection = l.TrackRate, l.TrackBurst, l.MaxTrackedPerConnection
}

// fillLimits sets the defaults of c's limits on zero fields.
func (c *Config) fillLimits() {
	l := c.Limits()
	l.fill()
	c.setLimits(l)
}

// fill sets defaults on zero fields.
func (l *Limits) fill() {
	if l.RequestRate == 0 {
		l.RequestRate = DefaultRequestRate
	}
	if l.RequestBurst == 0 {
		l.RequestBurst = DefaultRequestBurst
	}
	if l.SendRate == 0 {
		l.SendRate = DefaultSendRate
	}
	if l.SendBurst == 0 {
		l.SendBurst = DefaultSendBurst
	}
	if l.MetaRate == 0 {
		l.MetaRate = DefaultMetaRate
	}
	if l.MetaBurst == 0 {
		l.MetaBurst = DefaultMetaBurst
	}
	if l.MaxConnections == 0 {
		l.MaxConnections = DefaultMaxConnections
	}
	if l.MaxConnectionsPerIP == 0 {
		l.MaxConnectionsPerIP = DefaultMaxConnectionsPerIP
	}
	if l.MaxSessionsPerUser == 0 {
		l.MaxSessionsPerUser = DefaultMaxSessionsPerUser
	}
	if l.UserHelloRate == 0 {
		l.UserHelloRate = DefaultUserHelloRate
	}
	if l.UserHelloBurst == 0 {
		l.UserHelloBurst = DefaultUserHelloBurst
	}
	if l.IPHelloRate == 0 {
		l.IPHelloRate = DefaultIPHelloRate
	}
	if l.IPHelloBurst == 0 {
		l.IPHelloBurst = DefaultIPHelloBurst
	}
	if l.TrackRate == 0 {
		l.TrackRate = DefaultTrackRate
	}
	if l.TrackBurst == 0 {
		l.TrackBurst = DefaultTrackBurst
	}
	if l.MaxTrackedPerConnection == 0 {
		l.MaxTrackedPerConnection = DefaultMaxTrackedPerConnection
	}
}

// validate checks filled limits for a node that tells clients to heartbeat
// every heartbeat.
func (l *Limits) validate(heartbeat time.Duration) []error {
	var errs []error
	if math.IsNaN(l.RequestRate) || math.IsInf(l.RequestRate, 0) {
		errs = append(errs, fmt.Errorf("request rate (%v) must be a number", l.RequestRate))
	} else if l.RequestRate > 0 && l.RequestRate*heartbeat.Seconds() < MinRequestsPerHeartbeat {
		errs = append(errs, fmt.Errorf("request rate (%v/s) must allow at least %d requests per heartbeat interval (%v): at least %.3g/s",
			l.RequestRate, MinRequestsPerHeartbeat, heartbeat, MinRequestsPerHeartbeat/heartbeat.Seconds()))
	}
	if l.RequestBurst < 1 {
		errs = append(errs, fmt.Errorf("request burst (%d) must be at least 1", l.RequestBurst))
	}
	if math.IsNaN(l.SendRate) || math.IsInf(l.SendRate, 0) || l.SendBurst < 1 {
		errs = append(errs, fmt.Errorf("send rate (%v) must be a number and send burst (%d) at least 1", l.SendRate, l.SendBurst))
	}
	if math.IsNaN(l.MetaRate) || math.IsInf(l.MetaRate, 0) || l.MetaBurst < 1 {
		errs = append(errs, fmt.Errorf("meta rate (%v) must be a number and meta burst (%d) at least 1", l.MetaRate, l.MetaBurst))
	}
	if math.IsNaN(l.UserHelloRate) || math.IsInf(l.UserHelloRate, 0) || l.UserHelloBurst < 1 {
		errs = append(errs, fmt.Errorf("user hello rate (%v) must be a number and user hello burst (%d) at least 1", l.UserHelloRate, l.UserHelloBurst))
	}
	if math.IsNaN(l.IPHelloRate) || math.IsInf(l.IPHelloRate, 0) || l.IPHelloBurst < 1 {
		errs = append(errs, fmt.Errorf("IP hello rate (%v) must be a number and IP hello burst (%d) at least 1", l.IPHelloRate, l.IPHelloBurst))
	}
	if math.IsNaN(l.TrackRate) || math.IsInf(l.TrackRate, 0) || l.TrackBurst < protocol.MaxTrackPerRequest {
		errs = append(errs, fmt.Errorf("track rate (%v) must be a number and track burst (%d) at least %d, the sessions of one track",
			l.TrackRate, l.TrackBurst, protocol.MaxTrackPerRequest))
	}
	return errs
}

// Limits returns the limits the node enforces now.
func (n *Node) Limits() Limits { return *n.limits.Load() }

// SetLimits changes the node's limits while it runs, for a configuration
// reload (SIGHUP): zero fields take their defaults, as in Config. It
// returns the names of the fields that changed, with their old and new
// values ("RequestRate 100 -> 50"), or an error, and then changes nothing.
//
// Open connections and sessions keep going under the new limits at once:
// their token buckets refill at the new rates and hold at most the new
// bursts. Nothing already admitted is dropped: a connection count or a
// user's session count above a lowered cap only stops new ones until it
// falls below it.
func (n *Node) SetLimits(l Limits) (changed []string, err error) {
	l.fill()
	if errs := l.validate(n.cfg.Heartbeat); len(errs) > 0 {
		return nil, fmt.Errorf("node: invalid limits: %w", errors.Join(errs...))
	}
	n.limitsMu.Lock()
	defer n.limitsMu.Unlock()
	old := *n.limits.Load()
	diff := func(name string, was, is any) {
		if was != is {
			changed = append(changed, fmt.Sprintf("%s %v -> %v", name, was, is))
		}
	}
	diff("RequestRate", old.RequestRate, l.RequestRate)
	diff("RequestBurst", old.RequestBurst, l.RequestBurst)
	diff("SendRate", old.SendRate, l.SendRate)
	diff("SendBurst", old.SendBurst, l.SendBurst)
	diff("MetaRate", old.MetaRate, l.MetaRate)
	diff("MetaBurst", old.MetaBurst, l.MetaBurst)
	diff("MaxConnections", old.MaxConnections, l.MaxConnections)
	diff("MaxConnectionsPerIP", old.MaxConnectionsPerIP, l.MaxConnectionsPerIP)
	diff("MaxSessionsPerUser", old.MaxSessionsPerUser, l.MaxSessionsPerUser)
	diff("UserHelloRate", old.UserHelloRate, l.UserHelloRate)
	diff("UserHelloBurst", old.UserHelloBurst, l.UserHelloBurst)
	diff("IPHelloRate", old.IPHelloRate, l.IPHelloRate)
	diff("IPHelloBurst", old.IPHelloBurst, l.IPHelloBurst)
	diff("TrackRate", old.TrackRate, l.TrackRate)
	diff("TrackBurst", old.TrackBurst, l.TrackBurst)
	diff("MaxTrackedPerConnection", old.MaxTrackedPerConnection, l.MaxTrackedPerConnection)
	if len(changed) > 0 {
		n.limits.Store(&l)
	}
	return changed, nil
}

// allowRequest takes one request from the connection's allowance at mono
// time now, or, past it, replies rate_limited and reports false: the
// request is not handled, and the connection stays open. Called by the
// reader goroutine only (it owns c.requests). line is the request, read
// only for its id.
func (c *conn) allowRequest(line []byte, now int64) bool {
	lim := c.n.limits.Load()
	ok, wait := c.requests.allow(now, lim.RequestRate, lim.RequestBurst)
	if ok {
		return true
	}
	c.n.stats.rateLimited.Add(1)
	var id []byte
	if !isPlainHeartbeat(line) {
		id = requestID(line)
	}
	c.sendError(id, protocol.CodeRateLimited, "at most "+strconv.FormatFloat(lim.RequestRate, 'g', -1, 64)+
		" requests per second ("+strconv.Itoa(lim.RequestBurst)+" at once) per connection; the next is allowed in "+
		strconv.FormatInt(max(wait.Milliseconds(), 1), 10)+"ms")
	return false
}

// sourceKey returns the source a connection from addr is counted under
// per address: its IP, or for IPv6 the /IPv6PrefixBits network holding it
// (a single host is usually given a whole /64, so counting each address
// apart would let it open as many connections as it likes). It returns the
// zero Addr for an address that is not TCP (the connection is then not
// counted per source).
func (n *Node) sourceKey(addr net.Addr) netip.Addr {
	ta, ok := addr.(*net.TCPAddr)
	if !ok {
		return netip.Addr{}
	}
	ip := ta.AddrPort().Addr().Unmap()
	if ip.Is6() && n.cfg.IPv6PrefixBits > 0 && n.cfg.IPv6PrefixBits < 128 {
		if p, err := ip.WithZone("").Prefix(n.cfg.IPv6PrefixBits); err == nil {
			return p.Addr()
		}
	}
	return ip
}

// admitLocked decides whether an accepted connection from ip may stay,
// under the gateway's and the address's connection caps, and returns the
// code and message to refuse it with otherwise. The gateway's cap is
// MaxConnections, or less under the open-file limit (capMaxConnections).
// The caller holds n.mu.
func (n *Node) admitLocked(ip netip.Addr) (refuse protocol.ErrorCode, msg string) {
	lim := n.limits.Load()
	if max := n.capMaxConnections(lim.MaxConnections); max > 0 && len(n.conns) >= max {
		n.stats.overloaded.Add(1)
		return protocol.CodeOverloaded, "the gateway is at its connection limit; try another gateway"
	}
	if max := lim.MaxConnectionsPerIP; max > 0 && ip.IsValid() && n.perIP[ip] >= max {
		n.stats.tooManyConnections.Add(1)
		return protocol.CodeTooManyConnections, "this address holds " + strconv.Itoa(n.perIP[ip]) +
			" connections to the gateway, the most allowed; close one first"
	}
	return "", ""
}

// countConnLocked counts c against its source address (admitted) or stops
// counting it (!admitted). The caller holds n.mu.
func (n *Node) countConnLocked(c *conn, admitted bool) {
	if !c.ip.IsValid() {
		return
	}
	if admitted {
		n.perIP[c.ip]++
		return
	}
	n.uncountIPLocked(c.ip)
}

// uncountIPLocked stops counting one connection from key (a sourceKey).
// The caller holds n.mu.
func (n *Node) uncountIPLocked(key netip.Addr) {
	if !key.IsValid() {
		return
	}
	if k := n.perIP[key] - 1; k > 0 {
		n.perIP[key] = k
	} else {
		delete(n.perIP, key)
	}
}

// sessionCapLocked checks the per-user session cap for a hello of key's
// user: it returns a refusal when the user already holds
// MaxSessionsPerUser active sessions in this node's projection (every
// gateway's, as far as this node has heard) and key is not one of them (a
// reconnect of a device replaces its session, it does not add one). The
// caller holds n.mu, so the cap is exact for the hellos of one gateway;
// across gateways it is best effort (see docs/operations/configuration.md, "Limits").
func (n *Node) sessionCapLocked(c *conn, user, device string) *requestError {
	max := n.limits.Load().MaxSessionsPerUser
	if max <= 0 {
		return nil
	}
	held := n.replica.ActiveSessionCount(user)
	if held < max {
		return nil
	}
	if cur, ok := n.replica.Session(crdt.Key{User: user, Device: device}); ok && cur.State == crdt.StateActive {
		return nil
	}
	n.stats.tooManySessions.Add(1)
	n.log.Info("hello refused: too many sessions", zap.Uint64("conn", c.id), zap.String("remote", c.remote),
		zap.String("user", user), zap.Int("held", held), zap.Int("max", max))
	return errorf(protocol.CodeTooManySessions, "user %s holds %d active sessions, the most allowed; end one, or reconnect with the device name of one", truncate(user, 64), held)
}
