package gossip

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/rollcall/rollcall/cluster"
	"github.com/rollcall/rollcall/crdt"

	"github.com/rollcall/rollcall/dissem"
)

func TestClusterConvergesEagerly(t *testing.T) {
	tc := newTestCluster(t, 4)
	tc.waitMembers(4)
	for i, h := range tc.hosts {
		h.connect(t, fmt.Sprintf("user%d", i), "phone", "team")
	}
	waitFor(t, 5*time.Second, "every node to see every session", func() bool {
		for _, h := range tc.hosts {
			for i := range tc.hosts {
				if !h.presence(fmt.Sprintf("user%d", i)).Online {
					return false
				}
			}
		}
		return true
	})
	waitFor(t, 5*time.Second, "identical projections", tc.converged)
	// Eager mode: one direct copy per member per change, no relays. A
	// sender counts its copies after the sends, so a receiver may converge
	// first: wait for the count to reach N-1 per change, then check that
	// it did not pass it.
	var copies uint64
	want := uint64(4 * 3)
	waitFor(t, 5*time.Second, "the senders to count their copies", func() bool {
		copies = 0
		for _, c := range tc.nodes {
			copies += c.Stats().DeltaCopies.Load()
		}
		return copies >= want
	})
	if copies != want {
		t.Errorf("delta copies sent = %d, want %d (N-1 per change)", copies, want)
	}
}

func TestClusterRepairsLoss(t *testing.T) {
	// Push/pull only every minute: lost deltas must be found through the
	// alive announcements' watermarks and pulled.
	tc := newTestCluster(t, 3, func(c *Config) {
		c.Memberlist = func(m *memberlist.Config) { fastMemberlist(m); m.PushPullInterval = time.Minute }
	})
	tc.waitMembers(3)
	tc.net.SetLoss(0.3)
	users := 0
	for users < 60 || tc.net.Dropped() == 0 {
		i := users
		tc.hosts[i%3].connect(t, fmt.Sprintf("u%d", i), "d")
		if i%7 == 0 {
			tc.hosts[i%3].write(t, fmt.Sprintf("u%d", i), "d", crdt.StateActive, crdt.StatusAway, nil)
		}
		users++
		time.Sleep(time.Millisecond) // separate batches: separate packets to lose
		if users > 5000 {
			t.Fatal("no packet was ever dropped: the fault network is broken")
		}
	}
	waitFor(t, 5*time.Second, "writes flushed", func() bool {
		for _, c := range tc.nodes {
			c.mu.Lock()
			c.pubMu.Lock()
			n := c.core.Pending() + len(c.pubQ)
			c.pubMu.Unlock()
			c.mu.Unlock()
			if n > 0 {
				return false
			}
		}
		return true
	})
	tc.net.SetLoss(0)
	waitFor(t, 10*time.Second, "convergence after 30% loss", tc.converged)
	var pulls uint64
	for _, c := range tc.nodes {
		pulls += c.Stats().GapPulls.Load()
	}
	t.Logf("dropped %d packets; %d gap pulls", tc.net.Dropped(), pulls)
	if pulls == 0 {
		t.Error("no gap pulls: the loss was repaired some other way than the designed one")
	}
	for _, h := range tc.hosts {
		for i := range users {
			if !h.presence(fmt.Sprintf("u%d", i)).Online {
				t.Fatalf("u%d lost", i)
			}
		}
	}
}

func TestClusterHealsPartition(t *testing.T) {
	tc := newTestCluster(t, 4)
	tc.waitMembers(4)
	tc.net.Partition([]string{tc.addr(0), tc.addr(1)}, []string{tc.addr(2), tc.addr(3)})
	tc.hosts[0].connect(t, "alice", "phone")
	tc.hosts[3].connect(t, "bob", "laptop")
	time.Sleep(300 * time.Millisecond)
	if tc.hosts[3].presence("alice").Online {
		t.Fatal("alice crossed the partition")
	}
	tc.net.Heal()
	waitFor(t, 15*time.Second, "convergence after heal", func() bool {
		for _, h := range tc.hosts {
			if !h.presence("alice").Online || !h.presence("bob").Online {
				return false
			}
		}
		return tc.converged()
	})
}

func TestCrashedNodeSessionsExpireEverywhere(t *testing.T) {
	tc := newTestCluster(t, 3)
	tc.waitMembers(3)
	tc.hosts[2].connect(t, "carol", "phone", "ops")
	waitFor(t, 5*time.Second, "carol online everywhere", func() bool {
		return tc.hosts[0].presence("carol").Online && tc.hosts[1].presence("carol").Online
	})
	crashed := time.Now()
	tc.crash(2)
	waitFor(t, 10*time.Second, "carol offline on survivors", func() bool {
		return !tc.hosts[0].presence("carol").Online && !tc.hosts[1].presence("carol").Online
	})
	t.Logf("crash to offline on all survivors: %v", time.Since(crashed))
	// The record itself is untouched: a projection, not a write.
	tc.hosts[0].mu.Lock()
	s, ok := tc.hosts[0].r.Session(crdt.Key{User: "carol", Device: "phone"})
	_, down := tc.hosts[0].r.NodeDown("n2")
	tc.hosts[0].mu.Unlock()
	if !ok || s.State != crdt.StateExpired || !down {
		t.Fatalf("carol's record on n0: %+v (down %v)", s, down)
	}
}

func TestFalseSuspicionHeals(t *testing.T) {
	tc := newTestCluster(t, 3)
	tc.waitMembers(3)
	tc.hosts[2].connect(t, "dave", "phone")
	waitFor(t, 5*time.Second, "dave online on n0", func() bool { return tc.hosts[0].presence("dave").Online })
	// Cut n2 off both ways until the others give up on it.
	tc.net.Partition([]string{tc.addr(2)}, []string{tc.addr(0), tc.addr(1)})
	waitFor(t, 10*time.Second, "dave shown offline during the partition", func() bool {
		return !tc.hosts[0].presence("dave").Online
	})
	tc.net.Heal()
	waitFor(t, 15*time.Second, "dave online again after heal", func() bool {
		return tc.hosts[0].presence("dave").Online && tc.hosts[1].presence("dave").Online
	})
}

func TestRestartAsNewIncarnationDropsOldSessions(t *testing.T) {
	tc := newTestCluster(t, 3)
	tc.waitMembers(3)
	tc.hosts[2].connect(t, "erin", "phone")
	waitFor(t, 5*time.Second, "erin online on n0", func() bool { return tc.hosts[0].presence("erin").Online })
	tc.crash(2)
	// Restart at once, before any lease could pass: the new incarnation
	// alone must end the old sessions.
	i := tc.start("n2", 2)
	restarted := time.Now()
	waitFor(t, 5*time.Second, "erin offline after restart", func() bool {
		return !tc.hosts[0].presence("erin").Online && !tc.hosts[1].presence("erin").Online
	})
	t.Logf("restart to old sessions dropped: %v", time.Since(restarted))
	tc.hosts[i].connect(t, "frank", "phone")
	waitFor(t, 10*time.Second, "the new incarnation's sessions visible", func() bool {
		return tc.hosts[0].presence("frank").Online && tc.hosts[1].presence("frank").Online
	})
}

func TestRouteGoesThroughOwner(t *testing.T) {
	tc := newTestCluster(t, 3)
	tc.waitMembers(3)
	tc.hosts[1].connect(t, "gina", "phone")
	body := json.RawMessage(`{"text":"hi"}`)
	n, err := tc.nodes[0].Route(context.Background(), "n1", cluster.Message{To: "gina", From: "hank", FromDevice: "web", Body: body})
	if err != nil || n != 1 {
		t.Fatalf("route: delivered %d, err %v", n, err)
	}
	got := tc.hosts[1].deliveredMessages()
	if len(got) != 1 || got[0].From != "hank" || string(got[0].Body) != string(body) {
		t.Fatalf("owner received %+v", got)
	}
	for _, i := range []int{0, 2} {
		if len(tc.hosts[i].deliveredMessages()) != 0 {
			t.Fatalf("n%d received a message it does not own", i)
		}
	}
	if _, err := tc.nodes[0].Route(context.Background(), "nobody", cluster.Message{To: "gina", From: "hank"}); err == nil {
		t.Fatal("route to an unknown gateway succeeded")
	}
}

// TestKickGoesThroughOwner: a kick asks the gateway that owns the user's
// sessions, which answers how many it ended; one of a device asks for
// that device only.
func TestKickGoesThroughOwner(t *testing.T) {
	tc := newTestCluster(t, 3)
	tc.waitMembers(3)
	type kick struct{ user, device string }
	var mu sync.Mutex
	kicks := map[int][]kick{}
	for i, h := range tc.hosts {
		h.OnKick = func(user, device string) {
			mu.Lock()
			kicks[i] = append(kicks[i], kick{user, device})
			mu.Unlock()
		}
	}
	tc.hosts[1].connect(t, "gina", "phone")
	tc.hosts[1].connect(t, "gina", "laptop")
	ctx := context.Background()
	if n, err := tc.nodes[0].Kick(ctx, "n1", "gina", ""); err != nil || n != 2 {
		t.Fatalf("kick: ended %d, err %v", n, err)
	}
	if n, err := tc.nodes[2].Kick(ctx, "n1", "gina", "phone"); err != nil || n != 1 {
		t.Fatalf("kick of a device: ended %d, err %v", n, err)
	}
	if n, err := tc.nodes[0].Kick(ctx, "n2", "gina", ""); err != nil || n != 0 {
		t.Fatalf("kick where gina has no session: ended %d, err %v", n, err)
	}
	mu.Lock()
	got := kicks
	mu.Unlock()
	if want := []kick{{"gina", ""}, {"gina", "phone"}}; !slices.Equal(got[1], want) || len(got[0]) != 0 || len(got[2]) != 0 {
		t.Fatalf("kicks by host: %v, want %v on n1 only", got, want)
	}
	if _, err := tc.nodes[0].Kick(ctx, "nobody", "gina", ""); err == nil {
		t.Fatal("kick on an unknown gateway succeeded")
	}
}

func TestGarbagePacketsAreCountedAndDropped(t *testing.T) {
	tc := newTestCluster(t, 2)
	tc.waitMembers(2)
	tc.nodes[0].mu.Lock()
	target := tc.nodes[0].view.node("n1")
	tc.nodes[0].mu.Unlock()
	for _, junk := range [][]byte{{}, {0}, {1}, {dissem.WireVersion, 99}, {dissem.WireVersion, byte(dissem.TypeDeltas), 0xff, 0xff}, []byte("GET / HTTP/1.1\r\n"),
		append([]byte{dissem.WireVersion, byte(dissem.TypeDeltas), 0xdd, 0xff, 0xff, 0xff, 0xff}, make([]byte, 64)...)} {
		if err := tc.nodes[0].ml.SendBestEffort(target, junk); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 5*time.Second, "bad messages counted", func() bool { return tc.nodes[1].Stats().BadMessages.Load() >= 6 })
	tc.hosts[0].connect(t, "ivy", "phone")
	waitFor(t, 5*time.Second, "the node still works", func() bool { return tc.hosts[1].presence("ivy").Online })
}

func TestLeaveFlushesDisconnects(t *testing.T) {
	tc := newTestCluster(t, 3)
	tc.waitMembers(3)
	tc.hosts[2].connect(t, "jack", "phone")
	waitFor(t, 5*time.Second, "jack online", func() bool { return tc.hosts[0].presence("jack").Online })
	tc.net.SetLoss(1) // packets all lost: leave must not depend on them
	tc.hosts[2].write(t, "jack", "phone", crdt.StateDisconnected, crdt.StatusAvailable, nil)
	left := time.Now()
	if err := tc.nodes[2].Leave(time.Second); err != nil {
		t.Logf("leave: %v", err)
	}
	tc.nodes[2] = nil
	tc.net.SetLoss(0)
	waitFor(t, 5*time.Second, "jack offline after leave", func() bool {
		return !tc.hosts[0].presence("jack").Online && !tc.hosts[1].presence("jack").Online
	})
	t.Logf("leave to offline: %v", time.Since(left))
	s, _ := func() (crdt.Session, bool) {
		tc.hosts[0].mu.Lock()
		defer tc.hosts[0].mu.Unlock()
		return tc.hosts[0].r.Session(crdt.Key{User: "jack", Device: "phone"})
	}()
	if s.State != crdt.StateDisconnected {
		t.Fatalf("jack's record is %v, want disconnected (a clean close, not a detected failure)", s.State)
	}
	waitFor(t, 5*time.Second, "n2 listed as left, not dead", func() bool {
		for _, m := range tc.nodes[0].Members() {
			if m.Name == "n2" {
				return m.State == "left"
			}
		}
		return false
	})
}

// TestOversizedDeltaGoesOverStream writes a session whose delta is far
// larger than a packet (many long group names): it must arrive, over TCP,
// not be dropped.
func TestOversizedDeltaGoesOverStream(t *testing.T) {
	tc := newTestCluster(t, 3)
	tc.waitMembers(3)
	var groups []string
	for i := range crdt.MaxGroups {
		groups = append(groups, fmt.Sprintf("group-%03d-%0200d", i, i))
	}
	streams0 := tc.nodes[0].Stats().StreamsSent.Load()
	tc.hosts[0].connect(t, "big", "phone", groups...)
	waitFor(t, 5*time.Second, "the 60 KB delta everywhere", func() bool {
		return tc.hosts[1].presence("big").Online && tc.hosts[2].presence("big").Online
	})
	if tc.nodes[0].Stats().StreamsSent.Load() == streams0 {
		t.Fatal("the oversized delta did not go over a stream")
	}
	tc.hosts[2].Do(func(r *crdt.Replica) {
		if n := r.GroupOnlineCount(groups[crdt.MaxGroups-1]); n != 1 {
			t.Fatalf("last group has %d online on n2", n)
		}
	})
}

// TestJoinRetriesUntilTheSeedIsUp starts a node whose --join target does not
// exist yet, then starts the target: they must find each other.
func TestJoinRetriesUntilTheSeedIsUp(t *testing.T) {
	seedAddr := freeAddr(t)
	tc := newTestCluster(t, 0)
	early := testConfig("early", 1)
	early.Join = []string{seedAddr}
	h := newFakeHost(t, "early", 1)
	c, err := New(early, h)
	if err != nil {
		t.Fatal(err)
	}
	h.cluster = c
	tc.nodes, tc.hosts = append(tc.nodes, c), append(tc.hosts, h)
	time.Sleep(200 * time.Millisecond)
	seed := testConfig("seed", 1)
	seed.BindAddr = seedAddr
	sh := newFakeHost(t, "seed", 1)
	sc, err := New(seed, sh)
	if err != nil {
		t.Fatal(err)
	}
	sh.cluster = sc
	tc.nodes, tc.hosts = append(tc.nodes, sc), append(tc.hosts, sh)
	tc.waitMembers(2)
}

// TestOneWayPartitionWithDelay: with 20±10ms packet delay, n0 cannot send
// to n1 (n1 still reaches n0). n1 misses n0's writes and, once n0's lease
// passes, shows n0's sessions expired; n2 sees everything. After the heal
// every node converges and n0's sessions are online everywhere.
func TestOneWayPartitionWithDelay(t *testing.T) {
	tc := newTestCluster(t, 3)
	tc.waitMembers(3)
	tc.net.SetDelay(20*time.Millisecond, 10*time.Millisecond)
	tc.hosts[0].connect(t, "olga", "phone")
	waitFor(t, 5*time.Second, "olga everywhere through the delay", func() bool {
		return tc.hosts[1].presence("olga").Online && tc.hosts[2].presence("olga").Online
	})
	tc.net.Block(tc.addr(0), tc.addr(1))
	tc.hosts[0].connect(t, "pete", "phone")
	waitFor(t, 5*time.Second, "pete on n2", func() bool { return tc.hosts[2].presence("pete").Online })
	if tc.hosts[1].presence("pete").Online {
		t.Fatal("pete reached n1 across a one-way block")
	}
	waitFor(t, 10*time.Second, "n1 shows n0's sessions expired once its lease passes", func() bool {
		return !tc.hosts[1].presence("olga").Online
	})
	if !tc.hosts[2].presence("olga").Online {
		t.Fatal("n2, which hears n0, shows olga offline")
	}
	tc.net.Heal()
	waitFor(t, 15*time.Second, "convergence after the heal", func() bool {
		for _, h := range tc.hosts {
			if !h.presence("olga").Online || !h.presence("pete").Online {
				return false
			}
		}
		return tc.converged()
	})
}

// A member that compresses its messages (Config.Compress) and members that
// do not understand each other: the compressing member's full state, which
// LZW does shrink, reaches a member joining later, and the joiner's deltas
// reach it.
func TestCompressingAndPlainMembersInteroperate(t *testing.T) {
	tc := &testCluster{t: t, net: NewFaultNetwork(1), opts: []func(*Config){func(c *Config) {
		c.Compress = c.Name == "n0"
	}}}
	tc.run(1)
	for i := range 300 {
		tc.hosts[0].connect(t, fmt.Sprintf("user%d", i), "phone", "team")
	}
	tc.start("n1", 1)
	tc.waitMembers(2)
	tc.hosts[1].connect(t, "late", "phone", "team")
	waitFor(t, 10*time.Second, "both members to see every session", func() bool {
		for _, h := range tc.hosts {
			if !h.presence("late").Online || !h.presence("user0").Online || !h.presence("user299").Online {
				return false
			}
		}
		return true
	})
	waitFor(t, 10*time.Second, "identical projections", tc.converged)
}
