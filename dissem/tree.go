package dissem

import (
	"cmp"
	"hash/fnv"
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

// relayTree is the sorted list of the members alive (self included), and
// the numbers of their names in the OriginTable of the node that made it.
// A member's position in it is found by binary search: a map of positions
// cost as much as the list again, at every node.
type relayTree struct {
	names []string
	nums  []int32
	// users counts the nodes holding a tree of a TreeTable's trees (key
	// is its hash there); 0 for a private or base tree, which the table
	// does not keep.
	users int
	key   uint64
}

// position returns name's position in the tree's list, if it is there.
func (t *relayTree) position(name string) (int, bool) {
	return slices.BinarySearch(t.names, name)
}

// TreeTable shares relay trees between nodes whose member lists are equal:
// a simulator's nodes mostly list the same members, and a tree per node
// of ten thousand would hold ten thousand copies of one list. It keeps the
// sorted list of the last Members list a node read, so that nodes reading
// the same list sort it once. It is not safe for concurrent use: nodes
// that share one are driven from one goroutine, and share one
// OriginTable.
type TreeTable struct {
	trees map[uint64][]*relayTree // by hash of the list
	base  treeBase
	// private: the table of one node (Config.Trees nil), which keeps no
	// trees, only the sorted list.
	private bool
	origins *OriginTable // the table of the nodes that share it
	scratch []string
	nums    []int32
}

// treeBase is a Members list (members, in its order) and the tree over
// all of it: sorted, without repeats. It is not among the table's trees.
type treeBase struct {
	members []string
	tree    *relayTree
}

// NewTreeTable returns an empty table.
func NewTreeTable() *TreeTable { return &TreeTable{trees: make(map[uint64][]*relayTree)} }

// baseOf returns the tree over every member ms lists, sorted again only
// when the list differs from the one last read. Name numbers are t's.
func (tt *TreeTable) baseOf(ms Members, t *OriginTable) *relayTree {
	b := &tt.base
	k := ms.NumPeers()
	same := b.tree != nil && len(b.members) == k
	for i := 0; same && i < k; i++ {
		same = b.members[i] == ms.Peer(i)
	}
	if same {
		return b.tree
	}
	b.members = b.members[:0]
	for i := range k {
		b.members = append(b.members, ms.Peer(i))
	}
	names := slices.Compact(slices.Sorted(slices.Values(b.members)))
	nums := make([]int32, len(names))
	for i, name := range names {
		nums[i] = t.names.number(name)
	}
	b.tree = &relayTree{names: names, nums: nums}
	return b.tree
}

// intern returns the table's tree of the sorted list names (numbered
// nums), made from copies of them if there is none yet, for one more node
// to use (release ends the use). A tree no node uses any more leaves the
// table: under loss, suspicions make and unmake many member lists, and a
// table that kept every tree ever made grew by a list per change of view
// (at 1,000 nodes and 30% loss, tens of megabytes in a minute).
func (tt *TreeTable) intern(names []string, nums []int32) *relayTree {
	h := fnv.New64a()
	for _, name := range names {
		h.Write([]byte(name))
		h.Write([]byte{0})
	}
	key := h.Sum64()
	for _, t := range tt.trees[key] {
		if slices.Equal(t.names, names) {
			t.users++
			return t
		}
	}
	t := &relayTree{names: slices.Clone(names), nums: slices.Clone(nums), users: 1, key: key}
	tt.trees[key] = append(tt.trees[key], t)
	return t
}

// release ends one node's use of t, which leaves the table when no node
// uses it. A private or base tree is not the table's: nothing to do.
func (tt *TreeTable) release(t *relayTree) {
	if t == nil || t.users == 0 {
		return
	}
	t.users--
	if t.users > 0 {
		return
	}
	ts := slices.DeleteFunc(tt.trees[t.key], func(u *relayTree) bool { return u == t })
	if len(ts) == 0 {
		delete(tt.trees, t.key)
	} else {
		tt.trees[t.key] = ts
	}
}

// dropTree forgets the node's relay tree, to be built again when next
// needed, after the members alive changed.
func (n *Node) dropTree() {
	if n.relayTree != nil {
		n.trees.release(n.relayTree)
		n.relayTree = nil
	}
}

// tree returns the relay tree over the members alive, built again after
// any member's state changed: the tree over every listed member, less the
// peers this node holds not alive, plus itself.
func (n *Node) tree() *relayTree {
	if n.relayTree != nil {
		return n.relayTree
	}
	tt := n.trees
	base := tt.baseOf(n.members, n.origins)
	at, hasSelf := base.position(n.name)
	if hasSelf && n.notAlive == 0 {
		n.relayTree = base
		return base
	}
	names, nums := tt.scratch[:0], tt.nums[:0]
	for i, name := range base.names {
		if i == at && !hasSelf {
			names = append(names, n.name)
			nums = append(nums, n.origins.names.number(n.name))
		}
		if name == n.name {
			names, nums = append(names, name), append(nums, base.nums[i])
			continue
		}
		if p := n.peers.at(base.nums[i]); p == nil || p.state == StateAlive {
			names, nums = append(names, name), append(nums, base.nums[i])
		}
	}
	if at == len(base.names) && !hasSelf {
		names = append(names, n.name)
		nums = append(nums, n.origins.names.number(n.name))
	}
	tt.scratch, tt.nums = names, nums
	if tt.private {
		n.relayTree = &relayTree{names: slices.Clone(names), nums: slices.Clone(nums)}
	} else {
		n.relayTree = tt.intern(names, nums)
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
			if live(n.peers.at(t.nums[c])) {
				n.out().Sends = append(n.rd.Sends, Send{To: t.names[c], Msg: m})
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

// treeGap is the newest version of an origin (number num) a node saw
// relayed, and when: by the next check its replica should hold every write
// up to it.
type treeGap struct {
	num     int32
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
		s := &n.seen[nums[i]]
		if s.watched {
			continue
		}
		s.watched = true
		n.treeGaps = append(n.treeGaps, treeGap{num: nums[i], origin: o, version: s.version, since: now})
	}
}

// checkTreeGaps pulls from the owner of each origin whose writes up to a
// version seen treeGapWait ago are still not all held, in origin order.
func (n *Node) checkTreeGaps(now int64) {
	slices.SortFunc(n.treeGaps, func(a, b treeGap) int { return cmp.Compare(a.num, b.num) })
	kept := n.treeGaps[:0]
	for _, g := range n.treeGaps {
		if n.replica.Watermark(g.origin) >= g.version {
			n.seen[g.num].watched = false
			continue
		}
		kept = append(kept, g)
		if now-g.since < n.treeGapWait() {
			continue
		}
		// Kept until the hole is filled: a pull whose answer the owner
		// dropped (answers past its bound) is made again an interval on.
		kept[len(kept)-1].since = now
		name := g.origin.Node
		if n.pulling[name] || len(n.transfers) > 0 {
			continue
		}
		n.pulling[name] = true
		n.out().Pulls = append(n.rd.Pulls, name)
		n.out().Notes = append(n.rd.Notes, Note{Kind: NoteGapPull, Node: name, Version: g.version})
	}
	clear(n.treeGaps[len(kept):])
	n.treeGaps = kept
}
