package gossip

import "github.com/rollcall/rollcall/node"

var _ node.Membership = (*Cluster)(nil)

// MemberStates lists the members for the gateway's status page (/ui/): what
// Members returns, in the node's terms.
func (c *Cluster) MemberStates() []node.MemberState {
	members := c.Members()
	out := make([]node.MemberState, 0, len(members))
	for _, m := range members {
		out = append(out, node.MemberState{Name: m.Name, State: m.State, ClientAddr: m.ClientAddr,
			Sessions: m.Sessions, LeaseExpired: m.LeaseExpired, Self: m.Self})
	}
	return out
}
