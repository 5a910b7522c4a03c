package dissem

import (
	"hash/fnv"
	"maps"
	"slices"

	"github.com/rollcall/rollcall/crdt"
)

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

// relayTree is the sorted list of the members alive (self included). A
// member's position in it is found by binary search: a map of positions
// cost as much as the list again, at every node.
type relayTree struct {
	names []string
}

// position returns name's position in the tree's list, if it is there.
func (t *relayTree) position(name string) (int, bool) {
	return slices.BinarySearch(t.names, name)
}

// TreeTable shares relay trees between nodes whose member lists are equal:
// a simulator's nodes mostly list the same members, and a tree per node
// of ten thousand would hold ten thousand copies of one list. It is not
// safe for concurrent use: nodes that share one are driven from one
// goroutine.
type TreeTable struct {
	trees   map[uint64][]*relayTree // by hash of the list
	scratch []string
}

// NewTreeTable returns an empty table.
func NewTreeTable() *TreeTable { return &TreeTable{trees: make(map[uint64][]*relayTree)} }

// intern returns the table's tree of the sorted list names, made from a
// copy of names if there is none yet. A tree no node uses any more stays
// in the table: member lists change rarely.
func (tt *TreeTable) intern(names []string) *relayTree {
	h := fnv.New64a()
	for _, name := range names {
		h.Write([]byte(name))
		h.Write([]byte{0})
	}
	key := h.Sum64()
	for _, t := range tt.trees[key] {
		if slices.Equal(t.names, names) {
			return t
		}
	}
	t := &relayTree{names: slices.Clone(names)}
	tt.trees[key] = append(tt.trees[key], t)
	return t
}

// tree returns the relay tree over the members alive, built again after
// any member's state changed.
func (n *Node) tree() *relayTree {
	if n.relayTree != nil {
		return n.relayTree
	}
	var names []string
	if n.cfg.Trees != nil {
		names = n.cfg.Trees.scratch[:0]
	}
	names = append(names, n.name)
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
	if n.cfg.Trees != nil {
		n.cfg.Trees.scratch = names
		n.relayTree = n.cfg.Trees.intern(names)
	} else {
		n.relayTree = &relayTree{names: names}
	}
	return n.relayTree
}

// sendTree sends m, a batch of owner's deltas, to this node's children in
// owner's tree; a child not live is skipped for its own children. An
// owner missing from this node's list (a view that has not caught up)
// makes this node relay to every live member, as eager mode does.
func (n *Node) sendTree(m *Message, owner string) {
	t := n.tree()
	o, ok := t.position(owner)
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
	self, _ := t.position(n.name)
	visit(self)
}

// treeGapWait is how long a hole below a relayed version may last before
// it is pulled: an alive interval, checked at each announcement. Copies of
// one origin's writes come down one path in order, so a hole is a lost
// copy; pulling sooner measured worse under loss (a fifth of an interval,
// at 10% loss, 100 nodes, 2,000 changes/s: p99 6.1 s against 2.9 s), as
// owners drop the answers past their bound and members pull again.
func (n *Node) treeGapWait() int64 { return int64(n.cfg.AliveInterval) }

// treeGap is the newest version of an origin a node saw relayed, and
// when: by the next check its replica should hold every write up to it.
type treeGap struct {
	origin  crdt.Origin
	version uint64
	since   int64
}

// watchTreeGaps notes the versions a relayed batch brought. A copy lost on
// the way leaves a hole below them: its writes' owners announce only
// through the piggyback queue, which reaches each member now and then, so
// the hole is found from the deltas themselves.
func (n *Node) watchTreeGaps(ds []crdt.Delta, nums []int32, now int64) {
	for i := range ds {
		o := ds[i].Origin()
		if o.Node == n.name {
			continue
		}
		if _, ok := n.treeGaps[nums[i]]; ok {
			continue
		}
		if n.treeGaps == nil {
			n.treeGaps = make(map[int32]treeGap)
		}
		n.treeGaps[nums[i]] = treeGap{origin: o, version: n.seen[nums[i]].version, since: now}
	}
}

// checkTreeGaps pulls from the owner of each origin whose writes up to a
// version seen treeGapWait ago are still not all held, in origin order.
func (n *Node) checkTreeGaps(now int64) {
	for _, w := range slices.Sorted(maps.Keys(n.treeGaps)) {
		g := n.treeGaps[w]
		if n.replica.Watermark(g.origin) >= g.version {
			delete(n.treeGaps, w)
			continue
		}
		if now-g.since < n.treeGapWait() {
			continue
		}
		// Kept until the hole is filled: a pull whose answer the owner
		// dropped (answers past its bound) is made again an interval on.
		g.since = now
		n.treeGaps[w] = g
		name := g.origin.Node
		if n.pulling[name] || len(n.transfers) > 0 {
			continue
		}
		n.pulling[name] = true
		n.out().Pulls = append(n.rd.Pulls, name)
		n.out().Notes = append(n.rd.Notes, Note{Kind: NoteGapPull, Node: name, Version: g.version})
	}
}
