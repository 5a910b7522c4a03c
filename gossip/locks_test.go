package gossip

import (
	"sync"
	"testing"
	"time"

	"github.com/rollcall/rollcall/crdt"
)

// lockedHost is a host whose reads take a lock its owner also holds while
// it publishes, as node.Node does (it publishes under its own locks).
type lockedHost struct {
	*ReplicaHost
	mu *sync.Mutex
}

func (h lockedHost) SessionCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ReplicaHost.SessionCount()
}

// The core reads the host (its session count, for every announcement) with
// the Cluster's mutex held; a host that publishes with its own lock held
// must still get through Publish, or the two wait for each other forever.
func TestPublishNeverWaitsForTheLoop(t *testing.T) {
	var mu sync.Mutex
	rh, err := NewReplicaHost(crdt.Origin{Node: "n0", Incarnation: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(testConfig("n0", 1), lockedHost{rh, &mu})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Shutdown() //nolint:errcheck // test teardown

	mu.Lock()
	// Announcements every 100ms: the loop is soon blocked reading the
	// session count, holding the Cluster's mutex.
	time.Sleep(300 * time.Millisecond)
	var d crdt.Delta
	rh.Do(func(r *crdt.Replica) {
		d, err = r.PutLocal(crdt.Session{User: "u", Device: "d", ID: "s", Epoch: 1, State: crdt.StateActive}, time.Now().UnixNano())
	})
	if err != nil {
		mu.Unlock()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		c.Publish([]crdt.Delta{d})
		close(done)
	}()
	select {
	case <-done:
		mu.Unlock()
	case <-time.After(5 * time.Second):
		mu.Unlock()
		<-done
		t.Fatal("Publish waited for the loop, which waited for the host's lock: a deadlock")
	}
}
