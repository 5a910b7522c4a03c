package gossip

import (
	"bytes"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/memberlist"

	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/dissem"
	"github.com/rollcall/rollcall/internal/testkit"
)

// slowDownHost holds its first MarkNodeDown back until a MarkNodeUp has been
// made (or a second has passed): the window in which a lease expiry decided
// before an alive announcement could be applied after it.
type slowDownHost struct {
	*fakeHost
	hold     atomic.Bool
	upCalled chan struct{}
	once     sync.Once
	released chan struct{} // closed once the held MarkNodeDown is applied
}

func (h *slowDownHost) MarkNodeDown(n string) {
	if h.hold.CompareAndSwap(true, false) {
		select {
		case <-h.upCalled:
		case <-time.After(time.Second):
		}
		h.fakeHost.MarkNodeDown(n)
		close(h.released)
		return
	}
	h.fakeHost.MarkNodeDown(n)
}

func (h *slowDownHost) MarkNodeUp(n string) {
	h.fakeHost.MarkNodeUp(n)
	h.once.Do(func() { close(h.upCalled) })
}

// A peer whose lease passed while its packets were held up, and that is
// heard again at once, must end up shown alive: the lease table and the
// projection change in one order, so the stale "down" cannot land after the
// newer "up" and leave the peer's sessions offline for good.
func TestLeaseExpiryCannotOvertakeProofOfLife(t *testing.T) {
	var slow *slowDownHost
	tc := &testCluster{t: t, net: NewFaultNetwork(1), opts: []func(*Config){func(c *Config) {
		// Only leases detect failures here: memberlist's prober is off.
		c.Memberlist = func(m *memberlist.Config) { fastMemberlist(m); m.ProbeInterval = time.Hour }
	}}}
	tc.wrapHost = func(i int, h *fakeHost) Host {
		if i != 0 {
			return h
		}
		slow = &slowDownHost{fakeHost: h, upCalled: make(chan struct{}), released: make(chan struct{})}
		return slow
	}
	tc.run(2)
	tc.waitMembers(2)
	tc.hosts[1].connect(t, "alice", "phone")
	waitFor(t, 5*time.Second, "alice online on n0", func() bool { return tc.hosts[0].presence("alice").Online })

	slow.hold.Store(true)
	tc.net.Block(tc.addr(1), tc.addr(0))
	waitFor(t, 10*time.Second, "n0's lease of n1 to pass", func() bool {
		tc.nodes[0].mu.Lock()
		defer tc.nodes[0].mu.Unlock()
		p, _ := tc.nodes[0].core.Peer("n1")
		return p.ShownDown
	})
	tc.net.Heal()
	select {
	case <-slow.released:
	case <-time.After(10 * time.Second):
		t.Fatal("the held lease expiry was never applied")
	}
	waitFor(t, 10*time.Second, "alice online on n0 again", func() bool { return tc.hosts[0].presence("alice").Online })
	// And she stays online: n1 keeps announcing itself, and nothing is
	// left to mark it down.
	time.Sleep(500 * time.Millisecond)
	if !tc.hosts[0].presence("alice").Online {
		t.Fatal("alice shown offline on n0 after n1 was heard again")
	}
	tc.nodes[0].mu.Lock()
	p, _ := tc.nodes[0].core.Peer("n1")
	leaseDown := p.ShownDown
	tc.nodes[0].mu.Unlock()
	var shownDown bool
	tc.hosts[0].Do(func(r *crdt.Replica) { _, shownDown = r.NodeDown("n1") })
	if leaseDown != shownDown {
		t.Fatalf("lease table says down=%v, projection says down=%v", leaseDown, shownDown)
	}
}

// A freshly started node leases every member memberlist reports, heard from
// or not: a member that never reaches it expires by lease (not only by
// memberlist's slower failure detector, off here).
func TestFreshNodeLeasesMembersNeverHeard(t *testing.T) {
	tc := newTestCluster(t, 2, func(c *Config) {
		c.Memberlist = func(m *memberlist.Config) { fastMemberlist(m); m.ProbeInterval = time.Hour }
	})
	tc.waitMembers(2)
	tc.hosts[1].connect(t, "alice", "phone")
	waitFor(t, 5*time.Second, "alice online on n0", func() bool { return tc.hosts[0].presence("alice").Online })
	// n1 falls silent towards the newcomer before it ever hears from n1.
	addr := freeAddr(t)
	tc.opts = append(tc.opts, func(c *Config) { c.BindAddr = addr })
	tc.net.Block(tc.addr(1), addr)
	n2 := tc.start("n2", 1)
	waitFor(t, 5*time.Second, "alice's session synced to n2", func() bool {
		var ok bool
		tc.hosts[n2].Do(func(r *crdt.Replica) { _, ok = r.Session(crdt.Key{User: "alice", Device: "phone"}) })
		return ok
	})
	waitFor(t, 10*time.Second, "n2 to show n1's sessions expired by lease", func() bool {
		return !tc.hosts[n2].presence("alice").Online
	})
	if !tc.hosts[0].presence("alice").Online {
		t.Fatal("n0, which hears n1, must still show alice online")
	}
}

// freeAddr returns a loopback address held free for the test.
func freeAddr(t *testing.T) string {
	t.Helper()
	return testkit.FreeAddr(t)
}

// memberlist can declare a peer dead while the peer is speaking to us (a
// one-way partition here; a pause that ended, in production): its own
// announcements since are the newer truth. Its sessions must never flash
// offline, and it must not be cut off from our deltas.
func TestLateDeadVerdictDoesNotCutOffALivePeer(t *testing.T) {
	var offline atomic.Int32
	tc := &testCluster{t: t, net: NewFaultNetwork(1), opts: []func(*Config){func(c *Config) { c.ReconnectInterval = time.Hour }}}
	tc.onHost = func(i int, h *fakeHost) {
		if i == 0 {
			h.OnChange = func(users []string) {
				for _, u := range users {
					if u == "alice" && !h.presence("alice").Online {
						offline.Add(1)
					}
				}
			}
		}
	}
	tc.run(2)
	tc.waitMembers(2)
	tc.hosts[1].connect(t, "alice", "phone")
	waitFor(t, 5*time.Second, "alice online on n0", func() bool { return tc.hosts[0].presence("alice").Online })
	offline.Store(0)

	// n0's probes of n1 go unanswered; n1 still reaches n0.
	tc.net.Block(tc.addr(0), tc.addr(1))
	waitFor(t, 10*time.Second, "memberlist on n0 to declare n1 dead", func() bool {
		tc.nodes[0].mu.Lock()
		defer tc.nodes[0].mu.Unlock()
		p, ok := tc.nodes[0].core.Peer("n1")
		return ok && p.State == dissem.StateDead
	})
	time.Sleep(300 * time.Millisecond) // several announcements of n1 after the verdict
	tc.net.Heal()
	if n := offline.Load(); n > 0 {
		t.Fatalf("alice was shown offline on n0 %d times though n1 was heard throughout", n)
	}
	// n0 still sends to n1, which memberlist holds dead.
	tc.hosts[0].connect(t, "bob", "laptop")
	waitFor(t, 5*time.Second, "bob (on n0) online on n1", func() bool { return tc.hosts[1].presence("bob").Online })
}

// jumpClock is a clock that can jump forward, as a stopped process's clock
// does when it resumes. An armed jump happens just after the next reading
// of the stall detector's clock: the process stopped in the middle of a
// step.
type jumpClock struct {
	offset atomic.Int64
	armed  atomic.Int64
}

func (j *jumpClock) now() time.Time { return time.Now().Add(time.Duration(j.offset.Load())) }
func (j *jumpClock) elapsed(start time.Time) func() time.Duration {
	return func() time.Duration {
		d := time.Since(start) + time.Duration(j.offset.Load())
		j.offset.Add(j.armed.Swap(0))
		return d
	}
}

// stallPair starts two nodes, n0 on a clock that can jump, with alice
// connected to n1 and shown online on n0.
func stallPair(t *testing.T) (*jumpClock, *testCluster) {
	t.Helper()
	clk := &jumpClock{}
	start := time.Now()
	tc := newTestCluster(t, 2, func(c *Config) {
		if c.Name == "n0" {
			c.Now = clk.now
			c.elapsed = clk.elapsed(start)
		}
	})
	tc.waitMembers(2)
	tc.hosts[1].connect(t, "alice", "phone")
	waitFor(t, 5*time.Second, "alice online on n0", func() bool { return tc.hosts[0].presence("alice").Online })
	return clk, tc
}

// A gateway that was stopped (SIGSTOP, a paused VM) heard nothing while it
// was stopped, though its peers kept announcing themselves: on resume its
// leases must be extended by the stall, not expire every peer at once.
func TestOwnStallDoesNotExpirePeers(t *testing.T) {
	clk, tc := stallPair(t)
	var downs atomic.Int32
	// n0 "stops" for 5s, more than the 2s lease: its clock jumps. For the
	// next half second, five lease ticks, n1's announcements do not reach
	// it (on a real resume they are read within milliseconds from the
	// socket), so the lease ticks after the jump see nothing newer than the
	// stall. The jump may land anywhere in a step of n0's loop.
	tc.net.Block(tc.addr(1), tc.addr(0))
	clk.offset.Add(int64(5 * time.Second))
	deadline := time.Now().Add(500 * time.Millisecond)
	for time.Now().Before(deadline) {
		if !tc.hosts[0].presence("alice").Online {
			downs.Add(1)
		}
		time.Sleep(5 * time.Millisecond)
	}
	tc.net.Heal()
	if downs.Load() > 0 {
		t.Fatal("n0 showed n1's sessions expired after its own stall")
	}
}

// A stop can land between the two clock readings of one step of the loop:
// the stall detector's and the lease clock's. That step must not see the
// stall unsubtracted: a lease check would expire every peer, and a message
// handled would be recorded as heard in the future, so a peer that fails
// afterwards would be shown down a whole stall late.
func TestStallInsideAStepDoesNotExpirePeers(t *testing.T) {
	clk, tc := stallPair(t)
	for range 5 {
		clk.armed.Store(int64(5 * time.Second)) // more than the 2s lease
		deadline := time.Now().Add(300 * time.Millisecond)
		for time.Now().Before(deadline) {
			if !tc.hosts[0].presence("alice").Online {
				t.Fatal("n0 showed n1's sessions expired after its own stall")
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	// n1 fails now: n0 shows it down within its 2s lease, as if never stalled.
	tc.net.Partition([]string{tc.addr(0)}, []string{tc.addr(1)})
	waitFor(t, 3*time.Second, "n0 to show n1's sessions expired", func() bool { return !tc.hosts[0].presence("alice").Online })
}

// A gateway cut off long enough to be shown down ends a session meanwhile
// (its writes lost in the partition). When it is heard again, that session
// must not be shown online again, even for a moment, while the missed write
// is pulled.
func TestRevivedPeerNeverReshowsEndedSessions(t *testing.T) {
	var reshown atomic.Int32
	var cutOff atomic.Bool
	tc := &testCluster{t: t, net: NewFaultNetwork(1), opts: []func(*Config){func(c *Config) {
		// Leases alone detect the partition (memberlist's prober is off),
		// and only the revival pull repairs (no periodic push/pull).
		c.Memberlist = func(m *memberlist.Config) {
			fastMemberlist(m)
			m.ProbeInterval, m.PushPullInterval = time.Hour, time.Hour
		}
	}}}
	tc.onHost = func(i int, h *fakeHost) {
		if i == 0 {
			h.OnChange = func(users []string) {
				for _, u := range users {
					if u == "alice" && cutOff.Load() && h.presence("alice").Online {
						reshown.Add(1)
					}
				}
			}
		}
	}
	tc.run(2)
	tc.waitMembers(2)
	tc.hosts[1].connect(t, "alice", "phone")
	waitFor(t, 5*time.Second, "alice online on n0", func() bool { return tc.hosts[0].presence("alice").Online })

	tc.net.Partition([]string{tc.addr(0)}, []string{tc.addr(1)})
	waitFor(t, 10*time.Second, "n0 to show n1 down", func() bool { return !tc.hosts[0].presence("alice").Online })
	cutOff.Store(true)
	tc.hosts[1].write(t, "alice", "phone", crdt.StateDisconnected, crdt.StatusAvailable, nil)
	time.Sleep(50 * time.Millisecond) // the write is sent, and lost
	tc.net.Heal()
	waitFor(t, 10*time.Second, "alice's disconnect to reach n0", func() bool {
		var st crdt.State
		tc.hosts[0].Do(func(r *crdt.Replica) {
			s, _ := r.Session(crdt.Key{User: "alice", Device: "phone"})
			st = s.State
		})
		return st == crdt.StateDisconnected
	})
	waitFor(t, 10*time.Second, "n1 shown up on n0", func() bool {
		_, down := tc.hosts[0].nodeDown("n1")
		return !down
	})
	if n := reshown.Load(); n > 0 {
		t.Fatalf("alice's ended session was shown online again on n0 (%d changes)", n)
	}
}

// mlAlive is memberlist's alive message, as its wire format encodes it.
type mlAlive struct {
	Incarnation uint32
	Node        string
	Addr        []byte
	Port        uint16
	Meta        []byte
	Vsn         []uint8
}

// Without gossip encryption anyone can send memberlist messages to the
// gossip port. A malformed "alive" (no address, inverted protocol
// versions, no Rollcall metadata) must not enter the member list: one
// used to stall every join ("protocol version (2) is incompatible").
func TestMalformedMemberIsRefused(t *testing.T) {
	tc := newTestCluster(t, 2)
	tc.waitMembers(2)
	var buf bytes.Buffer
	buf.WriteByte(4)                                 // memberlist's aliveMsg
	forged := mlAlive{Incarnation: 9, Node: "ghost"} // no address, no versions, no metadata
	if err := codec.NewEncoder(&buf, &codec.MsgpackHandle{}).Encode(&forged); err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("udp", tc.addr(0))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for range 5 {
		if _, err := conn.Write(buf.Bytes()); err != nil {
			t.Fatal(err)
		}
	}
	// A newcomer still joins, and nobody lists the forged member.
	tc.start("n2", 1)
	tc.waitMembers(3)
	for _, i := range tc.live() {
		for _, m := range tc.nodes[i].ml.Members() {
			if m.Name == "ghost" {
				t.Fatalf("n%d lists the forged member %+v", i, m)
			}
		}
	}
}
