package gossip

import (
	"fmt"
	"testing"
	"time"
)

// TestStatusSummaryFromTheCluster: a gateway's status page lists the
// cluster's members with their client addresses and counts every gateway's
// sessions from its projection; a member that dies is shown dead, its
// sessions shown expired and no longer counted.
func TestStatusSummaryFromTheCluster(t *testing.T) {
	s := newStack(t, 3, 2*time.Second)
	s.waitMembers(3)
	for i, user := range []string{"alice", "bob", "carol"} {
		s.dial(i%2, user, "phone", nil).heartbeat(300 * time.Millisecond)
	}
	gw := s.nodes[2].gw
	counted := func(want string) func() bool {
		return func() bool { return fmt.Sprint(gw.StatusSummary().Gateways) == want }
	}
	waitFor(t, 10*time.Second, "the sessions counted on g2", counted("[{g0 2 false} {g1 1 false} {g2 0 true}]"))
	sum := gw.StatusSummary()
	if sum.Standalone || sum.Sessions != 3 || len(sum.Members) != 3 {
		t.Fatalf("summary %+v", sum)
	}
	for i, m := range sum.Members {
		if m.Name != fmt.Sprintf("g%d", i) || m.State != "alive" || m.ClientAddr != s.nodes[i].gw.ClientAddr().String() || m.Self != (i == 2) {
			t.Fatalf("member %d: %+v", i, m)
		}
	}

	s.kill(0)
	waitFor(t, 10*time.Second, "g0's sessions expired on g2", counted("[{g0 0 false} {g1 1 false} {g2 0 true}]"))
	waitFor(t, 10*time.Second, "g0 shown dead", func() bool {
		m := gw.StatusSummary().Members[0]
		return m.Name == "g0" && m.State == "dead" && m.LeaseExpired
	})
}
