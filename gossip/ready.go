package gossip

// Readiness: whether this node has joined its cluster and caught up with
// it, for the node's GET /readyz (node.ReadinessReporter), and the client
// addresses it and its peers advertise.

import (
	"net"
	"slices"
	"strings"

	"github.com/hashicorp/memberlist"
	"go.uber.org/zap"

	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/dissem"
)

// Ready returns a channel closed once the node is ready: a Join (at start,
// retried in the background, or Cluster.Join) reached at least one member,
// and the first anti-entropy exchange with a member brought this replica
// up to date with it. That exchange is the member's answer to this node's
// digest (the sync that memberlist's join push/pull triggers, or a gap
// pull's), or a member's digest that this replica already covers (a
// member that holds nothing this node lacks sends no answer). A node
// configured without Join is ready at once. Readiness never reverts.
func (c *Cluster) Ready() <-chan struct{} { return c.ready }

// Readiness reports whether the node is ready (see Ready) and, if not, why
// not. It implements node.ReadinessReporter.
func (c *Cluster) Readiness() (bool, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.joined && c.synced:
		return true, ""
	case !c.joined:
		return false, "no address of --join (" + strings.Join(c.cfg.Join, ",") + ") answered yet; retrying"
	}
	return false, "joined; waiting for the first anti-entropy exchange with a member"
}

// markJoined records a Join that reached n members.
func (c *Cluster) markJoined(n int) {
	if n <= 0 {
		return
	}
	c.mu.Lock()
	c.joined = true
	c.maybeReadyLocked("joined")
	c.mu.Unlock()
}

// markSynced records an anti-entropy exchange that brought this replica up
// to date with a member; how says which.
func (c *Cluster) markSynced(how string) {
	c.mu.Lock()
	c.synced = true
	c.maybeReadyLocked(how)
	c.mu.Unlock()
}

func (c *Cluster) maybeReadyLocked(last string) {
	if !c.joined || !c.synced {
		return
	}
	select {
	case <-c.ready:
	default:
		close(c.ready)
		c.log.Info("ready: joined the cluster and caught up with a member", zap.String("last", last))
	}
}

// checkCovered marks the node synced if it holds everything a member's
// digest says the member holds. Only while not ready yet: it asks the host
// for one watermark per origin. Called on handleLoop.
func (c *Cluster) checkCovered(d dissem.DigestMsg) {
	if d.From == c.cfg.Name {
		return
	}
	select {
	case <-c.ready:
		return
	default:
	}
	if covers(d.Digest, c.host.Watermark) {
		c.markSynced("a member's digest this replica already covers")
	}
}

// covers reports whether a replica whose watermarks watermark returns holds
// everything peer lists: for each origin, a watermark at or above the
// peer's and above every run the peer holds beyond it.
func covers(peer crdt.Digest, watermark func(crdt.Origin) uint64) bool {
	for _, e := range peer {
		need := e.Watermark
		if k := len(e.Held); k > 0 {
			need = max(need, e.Held[k-1].Through)
		}
		if need > 0 && watermark(e.Origin) < need {
			return false
		}
	}
	return true
}

// OtherGateways returns the client addresses advertised by the other live
// members that have not announced a leave and whose sessions this node
// shows (not lease-expired), sorted. It implements node.GatewayLister: a
// draining node tells its clients to reconnect there.
func (c *Cluster) OtherGateways() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, p := range c.core.Peers() {
		if !p.Listed || p.State != dissem.StateAlive || p.Leaving || p.ClientAddr == "" || p.ShownDown {
			continue
		}
		out = append(out, p.ClientAddr)
	}
	slices.Sort(out)
	return out
}

// AnnounceDrain tells every member, best effort (UDP), that this node is
// leaving, as Leave does later over TCP: from then on they leave it out of
// OtherGateways, so the clients of another gateway draining at the same
// time are not sent here. It implements node.DrainAnnouncer.
func (c *Cluster) AnnounceDrain() {
	c.mu.Lock()
	c.core.AnnounceDrain()
	rd := c.core.Ready().Clone() // executed while the loop goes on
	c.mu.Unlock()
	c.execute(rd, false)
}

// advertiseClientAddr settles the client address this node publishes
// (member metadata, alive announcements, Members, ClientAddrOf): the
// configured ClientAddr, or, when its host is unspecified (0.0.0.0, ::,
// empty), the gossip address memberlist advertises with the client port,
// since nobody can connect to 0.0.0.0. Called by New before memberlist
// starts.
func (c *Cluster) advertiseClientAddr(mlc *memberlist.Config) {
	if c.cfg.ClientAddr == "" {
		return
	}
	var gossipIP net.IP
	ip, _, err := mlc.Transport.FinalAdvertiseAddr(mlc.AdvertiseAddr, mlc.AdvertisePort)
	if err == nil {
		gossipIP = ip
	}
	addr, replaced := resolveClientAddr(c.cfg.ClientAddr, gossipIP)
	switch {
	case replaced:
		c.log.Info("client address advertised: the gossip advertise IP with the client port (the client address is unspecified)",
			zap.String("client_addr", c.cfg.ClientAddr), zap.String("advertised", addr))
	case isUnspecifiedHost(c.cfg.ClientAddr):
		c.log.Warn("client address advertised is unspecified and no gossip IP is known: give --client-advertise",
			zap.String("advertised", addr), zap.Error(err))
	default:
		c.log.Info("client address advertised", zap.String("advertised", addr))
	}
	c.cfg.ClientAddr = addr
}

// resolveClientAddr returns addr, or, when its host is unspecified and
// gossipIP is a usable address, gossipIP with addr's port (replaced).
func resolveClientAddr(addr string, gossipIP net.IP) (string, bool) {
	if !isUnspecifiedHost(addr) || gossipIP == nil || gossipIP.IsUnspecified() {
		return addr, false
	}
	_, port, _ := net.SplitHostPort(addr)
	return net.JoinHostPort(gossipIP.String(), port), true
}

// isUnspecifiedHost reports whether addr is host:port with an empty or
// unspecified (0.0.0.0, ::) host.
func isUnspecifiedHost(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}

// LiveGateways returns the names of this node and of the members that are
// alive (not declared dead or left), have not announced a
// leave or drain, and whose sessions this node shows (not lease-expired),
// sorted. It implements node.LiveGatewayLister: each user's webhooks are
// sent by one of them. A member stops counting when this node shows its
// sessions expired, before the host is told to (MarkNodeDown), so a
// gateway that sees a failed member's users go offline already counts
// the survivors only.
func (c *Cluster) LiveGateways() []string {
	out := []string{c.cfg.Name}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.core.Peers() {
		if !p.Listed || p.State != dissem.StateAlive || p.Leaving || p.ShownDown {
			continue
		}
		out = append(out, p.Name)
	}
	slices.Sort(out)
	return out
}
