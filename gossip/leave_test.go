package gossip

import (
	"sync"
	"testing"
	"time"
)

// Stopping every gateway at once (docker compose stop, a rolling script
// gone wrong) must not make each wait for the others to relay its leave:
// everyone is leaving, and a leave needs no quorum of leavers.
func TestSimultaneousLeaveNeedsNoQuorum(t *testing.T) {
	tc := newTestCluster(t, 3)
	tc.waitMembers(3)
	for i, h := range tc.hosts {
		h.connect(t, []string{"ann", "ben", "cid"}[i], "phone")
	}
	waitFor(t, 5*time.Second, "identical projections", tc.converged)
	errs := make([]error, len(tc.nodes))
	var wg sync.WaitGroup
	for i, c := range tc.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.Leave(3 * time.Second)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("n%d: leave: %v", i, err)
		}
		tc.nodes[i] = nil
	}
}
