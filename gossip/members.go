package gossip

import (
	"slices"
	"strings"

	"github.com/rollcall/rollcall/dissem"
)

// Member describes one cluster member as this node sees it.
type Member struct {
	Name        string `json:"name"`
	Addr        string `json:"addr"`
	State       string `json:"state"` // alive, suspect, dead or left (memberlist)
	Incarnation uint64 `json:"incarnation"`
	ClientAddr  string `json:"client_addr"`
	Sessions    int    `json:"sessions"` // active sessions it owns, as last announced
	// LeaseExpired is true when this node shows the member's sessions
	// expired (lease passed or memberlist declared it failed, or it was
	// heard again and its missed writes are still being pulled).
	LeaseExpired bool `json:"lease_expired"`
	Self         bool `json:"self,omitempty"`
	// In a multi-region cluster only: the member's region (a member is
	// always of this gateway's region: other regions' gateways are no
	// members), and Bridge "active" (its region's active bridge, as this
	// gateway chooses it), "standby" (bridge-capable, not active) or ""
	// (not bridge-capable); NoWAN when it last reported that it sees no
	// other region over the WAN pool.
	Region string `json:"region,omitempty"`
	Bridge string `json:"bridge,omitempty"`
	NoWAN  bool   `json:"no_wan,omitempty"`
}

// Members lists every member this node knows of, itself included, sorted by
// name.
func (c *Cluster) Members() []Member {
	multi := c.MultiRegion()
	out := []Member{{Name: c.cfg.Name, Addr: c.LocalAddr(), State: "alive", Incarnation: c.cfg.Incarnation,
		ClientAddr: c.cfg.ClientAddr, Sessions: c.host.SessionCount(), Self: true}}
	c.mu.Lock()
	for _, p := range c.core.Peers() {
		if !p.Listed && p.State == dissem.StateAlive {
			continue // heard of through gossip, not yet a memberlist member
		}
		var addr string
		if n := c.view.node(p.Name); n != nil {
			addr = n.Address()
		}
		out = append(out, Member{Name: p.Name, Addr: addr, State: p.State.String(), Incarnation: p.Incarnation,
			ClientAddr: p.ClientAddr, Sessions: p.Sessions, LeaseExpired: p.ShownDown})
	}
	c.mu.Unlock()
	if multi {
		c.markRegions(out)
	}
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// markRegions sets the members' region and bridge role.
func (c *Cluster) markRegions(out []Member) {
	c.mu.Lock()
	defer c.mu.Unlock()
	active := c.regions.ActiveBridgeOf()
	reach := c.regions.BridgeReach()
	for i := range out {
		m := &out[i]
		m.Region = c.cfg.Region
		bridge := c.wan != nil
		if !m.Self {
			meta, ok := c.members.get(m.Name)
			bridge = ok && meta.Bridge
		}
		if !bridge {
			continue
		}
		m.Bridge = "standby"
		if m.Name == active {
			m.Bridge = "active"
		}
		r, reported := reach[m.Name]
		m.NoWAN = reported && len(r) == 0
	}
}

// ClientAddrOf returns the client address a member published, if known.
func (c *Cluster) ClientAddrOf(name string) string {
	if name == c.cfg.Name {
		return c.cfg.ClientAddr
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, _ := c.core.Peer(name); p.ClientAddr != "" {
		return p.ClientAddr
	}
	return c.regions.ClientAddr(name) // a gateway of another region, as its region announced it
}

// HealthScore returns memberlist's health (awareness) score: 0 is
// healthy; higher means this node has been missing probe acks and nacks,
// is likely the slow or partitioned one, and waits longer before it
// suspects others.
func (c *Cluster) HealthScore() int { return c.ml.GetHealthScore() }

// QueuedBroadcasts returns the messages waiting in the epidemic broadcast
// queue.
func (c *Cluster) QueuedBroadcasts() int { return c.queue.NumQueued() }
