package gossip

import (
	"slices"
	"time"

	"github.com/rollcall/rollcall/cluster"
	"github.com/rollcall/rollcall/dissem"
)

// MemberStates lists the members for the gateway's status page (/ui/): what
// Members returns, in the node's terms.
func (c *Cluster) MemberStates() []cluster.MemberState {
	members := c.Members()
	out := make([]cluster.MemberState, 0, len(members))
	for _, m := range members {
		out = append(out, cluster.MemberState{Name: m.Name, State: m.State, ClientAddr: m.ClientAddr,
			Sessions: m.Sessions, LeaseExpired: m.LeaseExpired, Self: m.Self})
	}
	return out
}

// MultiRegion reports whether this gateway is part of a multi-region
// cluster: it names a region of its own, is bridge-capable, or a member of
// its region is.
func (c *Cluster) MultiRegion() bool {
	if c.cfg.Region != dissem.DefaultRegion || c.wan != nil {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return len((*regionView)(c).Bridges()) > 0 || len(c.regions.Regions()) > 0
}

// RegionStatus returns what this gateway knows of its region's bridges and
// of the other regions (GET /v1/regions, the status page); ok is false in
// a single-region cluster.
func (c *Cluster) RegionStatus() (s cluster.RegionStatus, ok bool) {
	if !c.MultiRegion() {
		return cluster.RegionStatus{Region: c.cfg.Region, Bridges: []cluster.BridgeState{}, Others: []cluster.OtherRegion{}}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.leaseNow()
	s = cluster.RegionStatus{Region: c.cfg.Region, ActiveBridge: c.regions.ActiveBridgeOf(),
		Bridges: []cluster.BridgeState{}, Others: []cluster.OtherRegion{}}
	reach := c.regions.BridgeReach()
	bridges := (*regionView)(c).Bridges()
	slices.Sort(bridges)
	for _, b := range slices.Compact(bridges) {
		r, reported := reach[b]
		if r == nil {
			r = []string{}
		}
		s.Bridges = append(s.Bridges, cluster.BridgeState{Name: b, Active: b == s.ActiveBridge, Reach: r, Reported: reported})
	}
	for _, r := range c.regions.Regions() {
		o := cluster.OtherRegion{Region: r.Region, Bridge: r.Bridge, Gateways: r.Gateways, Lease: "up", HeardAgoMS: -1}
		switch {
		case r.Reviving:
			o.Lease = "reviving"
		case r.Down:
			o.Lease = "expired"
		}
		if r.LastHeard != 0 {
			o.HeardAgoMS = max(now-r.LastHeard, 0) / int64(time.Millisecond)
		}
		s.Others = append(s.Others, o)
	}
	return s, true
}
