package gossip

import "github.com/rollcall/rollcall/cluster"

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
