package dissem

import "slices"

// Relay tree (ModeTree): a deterministic tree over the sorted list of the
// members alive, one per owner, for dissemination beyond EagerThreshold.
// Members whose views differ for a moment send a few copies twice or miss
// one; the receiver's freshness check relays each version once, and a
// missed copy shows as a gap against the owner's announcement, which is
// pulled.

// TreeFanout is the fanout of a relay tree of n members (owner included)
// of depth at most two: the smallest k with 1 + k + k*k >= n.
func TreeFanout(n int) int {
	k := 1
	for 1+k+k*k < n {
		k++
	}
	return k
}

// TreeChildren returns the positions, in a sorted member list of n
// members, of the children of the member at position self in the tree
// rooted at the owner at position owner: the list rotated to start at the
// owner, laid out as a k-ary heap (the children of rotated position r are
// r*k+1 .. r*k+k).
func TreeChildren(n, k, owner, self int) []int {
	if n <= 0 || k <= 0 || owner < 0 || owner >= n || self < 0 || self >= n {
		return nil
	}
	r := (self - owner + n) % n
	var out []int
	for c := r*k + 1; c <= r*k+k && c < n; c++ {
		out = append(out, (c+owner)%n)
	}
	return out
}

// relayTree is the sorted list of the members alive (self included) and
// each one's position in it.
type relayTree struct {
	names []string
	pos   map[string]int
}

// tree returns the relay tree over the members alive, built again after
// any member's state changed.
func (n *Node) tree() *relayTree {
	if n.relayTree != nil {
		return n.relayTree
	}
	names := []string{n.name}
	for i, k := 0, n.members.NumPeers(); i < k; i++ {
		name := n.members.Peer(i)
		if name == n.name {
			continue
		}
		if p := n.peers[name]; p == nil || p.state == StateAlive {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	names = slices.Compact(names)
	t := &relayTree{names: names, pos: make(map[string]int, len(names))}
	for i, name := range names {
		t.pos[name] = i
	}
	n.relayTree = t
	return t
}

// sendTree sends m, a batch of owner's deltas, to this node's children in
// owner's tree; a child not live is skipped for its own children. An
// owner missing from this node's list (a view that has not caught up)
// makes this node relay to every live member, as eager mode does.
func (n *Node) sendTree(m *Message, owner string) {
	t := n.tree()
	o, ok := t.pos[owner]
	if !ok {
		n.sendLive(m, false)
		return
	}
	size, k := len(t.names), TreeFanout(len(t.names))
	var visit func(p int)
	visit = func(p int) {
		for _, c := range TreeChildren(size, k, o, p) {
			if name := t.names[c]; n.Live(name) {
				n.out().Sends = append(n.rd.Sends, Send{To: name, Msg: m})
			} else {
				visit(c)
			}
		}
	}
	visit(t.pos[n.name])
}
