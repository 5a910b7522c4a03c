package sim

import (
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/dissem"
	"github.com/rollcall/rollcall/gossip"
)

// The simulator and real gossip.Clusters drive one protocol core: fed the
// same writes, they send the same Rollcall messages, to the byte. Three
// gateways in eager mode over the fault-injecting transport (fault-free
// here), five owner writes far enough apart to be flushed one by one:
// the delta packets are counted and sized exactly, and every alive
// announcement has the same size both ways (how many there are depends on
// how long the real cluster ran).
func TestSimulatorSendsWhatTheClusterSends(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real clusters")
	}
	const nodes, writes = 3, 5
	session := func(i int) crdt.Session {
		return crdt.Session{User: fmt.Sprintf("user%d", i), Device: "phone", ID: fmt.Sprintf("s-%d", i),
			Epoch: 1_790_000_000_000 + uint64(i), State: crdt.StateActive, Status: crdt.StatusAvailable,
			Groups: []string{"team"}, ExpiresAt: wallBase + 1_000_000_000_000}
	}

	// The cluster.
	net := gossip.NewFaultNetwork(1)
	var hosts []*gossip.ReplicaHost
	var clusters []*gossip.Cluster
	for i := range nodes {
		name := fmt.Sprintf("n%d", i)
		h, err := gossip.NewReplicaHost(crdt.Origin{Node: name, Incarnation: incarnation(1)}, nil)
		if err != nil {
			t.Fatal(err)
		}
		cfg := gossip.DefaultConfig()
		cfg.Name, cfg.Incarnation, cfg.ClientAddr = name, incarnation(1), clientAddr(int32(i))
		cfg.BindAddr, cfg.Profile, cfg.Logger = "127.0.0.1:0", "local", zap.NewNop()
		cfg.WrapTransport = net.Wrap
		if i > 0 {
			cfg.Join = []string{clusters[0].LocalAddr()}
		}
		c, err := gossip.New(cfg, h)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Shutdown() })
		hosts, clusters = append(hosts, h), append(clusters, c)
	}
	within(t, 10*time.Second, "every member sees every other", func() bool {
		for _, c := range clusters {
			alive := 0
			for _, m := range c.Members() {
				if m.State == "alive" && !m.LeaseExpired {
					alive++
				}
			}
			if alive != nodes {
				return false
			}
		}
		return true
	})
	for i := range writes {
		var d crdt.Delta
		var err error
		hosts[0].Do(func(r *crdt.Replica) { d, err = r.PutLocal(session(i), time.Now().UnixNano()) })
		if err != nil {
			t.Fatal(err)
		}
		clusters[0].Publish([]crdt.Delta{d})
		time.Sleep(50 * time.Millisecond)
	}
	within(t, 10*time.Second, "every write everywhere", func() bool {
		for _, h := range hosts {
			held := 0
			h.Do(func(r *crdt.Replica) {
				for i := range writes {
					if _, ok := r.Session(crdt.Key{User: session(i).User, Device: "phone"}); ok {
						held++
					}
				}
			})
			if held != writes {
				return false
			}
		}
		return true
	})
	// An alive round (AliveInterval) with every member in view.
	time.Sleep(gossip.DefaultConfig().AliveInterval + 200*time.Millisecond)
	real := make(map[[2]string][2]uint64) // [type, transport] -> messages, bytes
	for _, c := range clusters {
		for _, tr := range c.Stats().Sent() {
			k := [2]string{tr.Type, tr.Transport}
			v := real[k]
			real[k] = [2]uint64{v[0] + tr.Messages, v[1] + tr.Bytes}
		}
	}

	// The simulator, fed the same writes (its client workload left out).
	cfg := Config{Nodes: nodes, Changes: 1, Duration: 10 * time.Second, Seed: 1}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	runTo := func(at int64) {
		for s.q.len() > 0 && s.q.peekAt() <= at {
			e := s.q.pop()
			s.now = e.at
			if e.kind == evChange || e.kind == evExpire {
				continue
			}
			s.dispatch(&e)
		}
		s.now = at
	}
	owner := s.nodes[0]
	for i := range writes {
		runTo(int64(time.Second) + int64(i)*int64(50*time.Millisecond))
		d, err := owner.r.PutLocal(session(i), s.wall())
		if err != nil {
			t.Fatal(err)
		}
		owner.sessions++
		s.publish(owner, d)
	}
	runTo(int64(cfg.Duration))
	simSent := func(t dissem.Type, stream int) [2]uint64 {
		c := s.stats.sent[t][stream]
		return [2]uint64{c.msgs, c.bytes}
	}

	if got, want := simSent(dissem.TypeDeltas, 0), real[[2]string{"deltas", "packet"}]; got != want {
		t.Errorf("delta packets (messages, bytes): simulator %v, cluster %v", got, want)
	}
	if got := real[[2]string{"deltas", "packet"}]; got[0] != writes*(nodes-1) {
		t.Errorf("cluster sent %d delta packets, want one per write and member: %d", got[0], writes*(nodes-1))
	}
	if got, want := simSent(dissem.TypeDeltas, 1), real[[2]string{"deltas", "stream"}]; got != want {
		t.Errorf("delta streams: simulator %v, cluster %v", got, want)
	}
	simAlive, realAlive := simSent(dissem.TypeAlive, 0), real[[2]string{"alive", "packet"}]
	if simAlive[0] == 0 || realAlive[0] == 0 {
		t.Fatalf("no alive announcements: simulator %v, cluster %v", simAlive, realAlive)
	}
	if simAlive[1]*realAlive[0] != realAlive[1]*simAlive[0] {
		t.Errorf("alive announcement sizes differ: simulator %d bytes in %d, cluster %d in %d",
			simAlive[1], simAlive[0], realAlive[1], realAlive[0])
	}
}

func within(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
