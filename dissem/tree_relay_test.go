package dissem

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/rollcall/rollcall/crdt"
)

func treeHarness(t *testing.T, n int) *harness {
	t.Helper()
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("n%03d", i)
	}
	h, err := newHarness(names, func(c *Config) {
		c.EagerThreshold, c.Relay, c.BatchDelay = 8, RelayTree, 0
	})
	if err != nil {
		t.Fatal(err)
	}
	h.stabilize()
	return h
}

// Beyond the eager threshold with the tree relay, each owner's write
// reaches every member, in about one copy per member, whoever writes.
func TestTreeRelayReachesEveryMemberAboutOnce(t *testing.T) {
	const members = 40
	h := treeHarness(t, members)
	if m := h.nodes["n000"].core.Mode(); m != ModeTree {
		t.Fatalf("mode %s with %d members, threshold 8", m, members)
	}
	for i, owner := range []string{"n000", "n017", "n039"} {
		h.delivered = nil
		if err := h.write(h.nodes[owner], fmt.Sprintf("u%d", i), "d", crdt.StatusAvailable, crdt.StateActive); err != nil {
			t.Fatal(err)
		}
		h.drive(h.nodes[owner], "publish")
		h.stabilize()
		if err := h.converged(); err != nil {
			t.Fatalf("write at %s: %v", owner, err)
		}
		if got := h.delivered[TypeDeltas]; got != members-1 {
			t.Fatalf("write at %s: %d delta copies for %d members, want %d", owner, got, members, members-1)
		}
	}
}

// A member down is skipped for its children, so the members below it in
// the tree still get the write.
func TestTreeRelaySkipsADownMemberForItsChildren(t *testing.T) {
	const members = 30
	h := treeHarness(t, members)
	// n001 is the owner n000's first child: every member learns it failed.
	for _, name := range h.names {
		if name != "n001" {
			h.nodes[name].core.MemberFailed("n001", false, h.now)
			h.drive(h.nodes[name], "failed")
		}
	}
	h.stabilize()
	if err := h.write(h.nodes["n000"], "u", "d", crdt.StatusAvailable, crdt.StateActive); err != nil {
		t.Fatal(err)
	}
	h.drive(h.nodes["n000"], "publish")
	h.stabilize()
	for _, name := range h.names {
		if name == "n001" || name == "n000" {
			continue
		}
		if _, ok := h.nodes[name].r.Session(crdt.Key{User: "u", Device: "d"}); !ok {
			t.Fatalf("%s missed the write", name)
		}
	}
}

// A relayed copy lost on the way (here the owner's copy to its first child,
// so that child's subtree misses it too) is pulled once a later write shows
// the hole and an alive interval passes: the replicas converge.
func TestTreeRelayPullsALostCopy(t *testing.T) {
	const members = 30
	h := treeHarness(t, members)
	owner := h.nodes["n000"]
	if err := h.write(owner, "lost", "d", crdt.StatusAvailable, crdt.StateActive); err != nil {
		t.Fatal(err)
	}
	h.drive(owner, "publish")
	dropped := false
	for i, f := range h.flight {
		if f.msg.Type == TypeDeltas && f.to == "n001" {
			h.drop(i)
			dropped = true
			break
		}
	}
	if !dropped {
		t.Fatal("no copy from the owner to n001 in flight")
	}
	h.stabilize()
	if _, ok := h.nodes["n001"].r.Session(crdt.Key{User: "lost", Device: "d"}); ok {
		t.Fatal("n001 holds the write whose copy was dropped")
	}
	h.advance(10 * time.Millisecond) // past the write window
	if err := h.write(owner, "later", "d", crdt.StatusAvailable, crdt.StateActive); err != nil {
		t.Fatal(err)
	}
	h.drive(owner, "publish")
	h.stabilize()
	for range 3 {
		h.advance(time.Second)
		h.stabilize()
	}
	if err := h.converged(); err != nil {
		t.Fatalf("after the gap pulls: %v", err)
	}
}

// Nodes sharing a TreeTable relay as nodes with trees of their own do:
// every member gets each write in one copy, and a member down in their
// lists is skipped for its children.
func TestTreeRelayWithSharedTrees(t *testing.T) {
	const members = 30
	names := make([]string, members)
	for i := range names {
		names[i] = fmt.Sprintf("n%03d", i)
	}
	trees := NewTreeTable()
	h, err := newHarness(names, func(c *Config) {
		c.EagerThreshold, c.Relay, c.BatchDelay, c.Trees = 8, RelayTree, 0, trees
	})
	if err != nil {
		t.Fatal(err)
	}
	h.stabilize()
	for _, name := range h.names {
		if name != "n001" {
			h.nodes[name].core.MemberFailed("n001", false, h.now)
			h.drive(h.nodes[name], "failed")
		}
	}
	h.stabilize()
	h.delivered = nil
	if err := h.write(h.nodes["n000"], "u", "d", crdt.StatusAvailable, crdt.StateActive); err != nil {
		t.Fatal(err)
	}
	h.drive(h.nodes["n000"], "publish")
	h.stabilize()
	for _, name := range h.names {
		if name == "n001" || name == "n000" {
			continue
		}
		if _, ok := h.nodes[name].r.Session(crdt.Key{User: "u", Device: "d"}); !ok {
			t.Fatalf("%s missed the write", name)
		}
	}
	if got := h.delivered[TypeDeltas]; got != members-2 {
		t.Fatalf("%d delta copies for %d live members besides the owner, want %d", got, members-2, members-2)
	}
	// Every member that relayed lists the same members: one tree for all.
	if got := len(trees.trees); got != 1 {
		t.Fatalf("%d distinct trees, want 1", got)
	}
}

// A relay tree holds the numbers of its members' names, so nodes that
// share a TreeTable must number names alike: a node given another
// OriginTable than the one the table's nodes use is refused.
func TestSharedTreesNeedSharedOrigins(t *testing.T) {
	trees := NewTreeTable()
	cfg := DefaultConfig()
	cfg.Rand = rand.New(rand.NewPCG(1, 2))
	cfg.Trees, cfg.Origins = trees, NewOriginTable()
	var a, b, c Node
	cfg.Name = "a"
	if err := a.Init(cfg, nil, nil); err != nil {
		t.Fatalf("first node: %v", err)
	}
	cfg.Name = "b"
	if err := b.Init(cfg, nil, nil); err != nil {
		t.Fatalf("second node, same tables: %v", err)
	}
	cfg.Name, cfg.Origins = "c", NewOriginTable()
	if err := c.Init(cfg, nil, nil); err == nil {
		t.Fatal("a node sharing the trees with its own OriginTable was accepted")
	}
}

// A member that joins a cluster already past the eager threshold is in
// every member's relay tree from the moment memberlist reports it: each
// owner's writes reach it relayed, in one copy per member, not only through
// gap pulls an announcement later.
func TestTreeRelayReachesAMemberThatJoinsLater(t *testing.T) {
	const members = 30
	h := treeHarness(t, members)
	// Every member builds its tree: one write from each of a few owners.
	for i, owner := range []string{"n000", "n011", "n029"} {
		if err := h.write(h.nodes[owner], fmt.Sprintf("before%d", i), "d", crdt.StatusAvailable, crdt.StateActive); err != nil {
			t.Fatal(err)
		}
		h.drive(h.nodes[owner], "publish")
	}
	h.stabilize()
	// n0105 joins: it sorts between n010 and n011, so it moves the tree
	// positions of the members after it.
	const joiner = "n0105"
	h.names = append(h.names, joiner)
	slices.Sort(h.names)
	inc := uint64(harnessEpoch) + 1000
	hn, err := h.newNode(slices.Index(h.names, joiner), inc)
	if err != nil {
		t.Fatal(err)
	}
	h.nodes[joiner] = hn
	for _, name := range h.names {
		n := h.nodes[name]
		n.members = len(h.names)
		if name == joiner {
			continue
		}
		hn.core.MemberAlive(name, Meta{Incarnation: n.core.cfg.Incarnation}, h.now)
		n.core.MemberAlive(joiner, Meta{Incarnation: inc}, h.now)
		h.drive(n, "member-alive")
	}
	hn.core.Start(h.now, false)
	h.drive(hn, "join")
	h.stabilize()
	for i, owner := range []string{"n000", "n011", "n029", "n005"} {
		h.delivered = nil
		k := crdt.Key{User: fmt.Sprintf("after%d", i), Device: "d"}
		if err := h.write(h.nodes[owner], k.User, k.Device, crdt.StatusAvailable, crdt.StateActive); err != nil {
			t.Fatal(err)
		}
		h.drive(h.nodes[owner], "publish")
		// Only the relayed copies: no time passes, so no announcement or
		// gap pull can bring the write instead.
		for len(h.flight) > 0 {
			h.deliver(0)
		}
		if _, ok := hn.r.Session(k); !ok {
			t.Fatalf("write at %s: the joined member %s did not get it relayed", owner, joiner)
		}
		if got := h.delivered[TypeDeltas]; got != len(h.names)-1 {
			t.Fatalf("write at %s: %d delta copies for %d members, want %d", owner, got, len(h.names), len(h.names)-1)
		}
	}
}

// A shared TreeTable keeps the trees its nodes use, not every tree they
// ever used: after every member's view changed twice, each tree in the
// table is one some node holds, and counts the nodes that hold it (the
// tree of the first change, which most members left, among them).
func TestSharedTreesForgetTreesNoNodeUses(t *testing.T) {
	const members = 30
	names := make([]string, members)
	for i := range names {
		names[i] = fmt.Sprintf("n%03d", i)
	}
	trees := NewTreeTable()
	h, err := newHarness(names, func(c *Config) {
		c.EagerThreshold, c.Relay, c.BatchDelay, c.Trees = 8, RelayTree, 0, trees
	})
	if err != nil {
		t.Fatal(err)
	}
	h.stabilize()
	var first *relayTree
	firstHeld := 0
	for round, down := range []string{"n001", "n002"} {
		for _, name := range h.names {
			if name != down {
				h.nodes[name].core.MemberFailed(down, false, h.now)
				h.drive(h.nodes[name], "failed")
			}
		}
		h.stabilize()
		if err := h.write(h.nodes["n000"], "u", fmt.Sprintf("d%d", round), crdt.StatusAvailable, crdt.StateActive); err != nil {
			t.Fatal(err)
		}
		h.drive(h.nodes["n000"], "publish")
		h.stabilize()
		if round == 0 {
			first = h.nodes["n010"].core.tree()
		}
	}
	users := map[*relayTree]int{}
	for _, name := range h.names {
		if rt := h.nodes[name].core.relayTree; rt != nil && rt.users > 0 {
			users[rt]++
		}
	}
	held := 0
	for _, ts := range trees.trees {
		for _, rt := range ts {
			held++
			if rt == first {
				firstHeld = rt.users
			}
			if rt.users != users[rt] || rt.users == 0 {
				t.Errorf("a tree of the table counts %d users, %d nodes hold it", rt.users, users[rt])
			}
		}
	}
	if held != len(users) {
		t.Errorf("the table holds %d trees, the nodes %d", held, len(users))
	}
	if firstHeld >= members-3 {
		t.Errorf("the first change's tree counts %d users after most members left it", firstHeld)
	}
}

// A node's Ready keeps small list buffers for the next Ready, but not the
// cluster-long Sends list of a send to every member.
func TestReadyDropsALongSendsBuffer(t *testing.T) {
	long := Ready{Sends: make([]Send, 4*maxKeptSends)}
	long.truncate()
	if len(long.Sends) != 0 || cap(long.Sends) > maxKeptSends {
		t.Errorf("after a send to %d members the Sends buffer holds %d (len %d), want at most %d", 4*maxKeptSends, cap(long.Sends), len(long.Sends), maxKeptSends)
	}
	short := Ready{Sends: make([]Send, 3, 8)}
	short.Sends[0].Msg = &Message{}
	short.truncate()
	if len(short.Sends) != 0 || cap(short.Sends) != 8 || short.Sends[:1][0].Msg != nil {
		t.Errorf("a short Sends buffer is not kept empty and cleared: len %d cap %d", len(short.Sends), cap(short.Sends))
	}
}
