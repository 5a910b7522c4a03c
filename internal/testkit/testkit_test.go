package testkit_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/rollcall/rollcall/internal/testkit"
	"github.com/rollcall/rollcall/node"
)

// WaitFor returns once a condition another goroutine makes true holds.
func TestWaitForReturnsOnceTheConditionHolds(t *testing.T) {
	var done atomic.Bool
	go func() {
		time.Sleep(20 * time.Millisecond)
		done.Store(true)
	}()
	testkit.WaitFor(t, 10*time.Second, "the flag", done.Load)
	if !done.Load() {
		t.Fatal("WaitFor returned before the condition held")
	}
}

// A LineClient says hello, is welcomed, and reads replies and errors by op.
func TestLineClientSpeaksTheProtocol(t *testing.T) {
	cfg := node.DefaultConfig()
	cfg.Name, cfg.ClientAddr, cfg.Dev = "n", "127.0.0.1:0", true
	n, err := node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })

	c := testkit.DialLine(t, n.ClientAddr().String(), "alice", "phone", map[string]any{"status": "away"})
	if c.Welcome["user"] != "alice" || c.Welcome["gateway"] != "n" {
		t.Fatalf("welcome %v", c.Welcome)
	}
	c.Heartbeat(100 * time.Millisecond)
	c.Send(map[string]any{"op": "get", "users": []string{"alice"}, "id": 1})
	p := c.Expect("presence", 10*time.Second)
	if _, stamped := p[testkit.ReceivedAt].(time.Time); p["id"] != float64(1) || !stamped {
		t.Fatalf("presence %v", p)
	}
	c.Send(map[string]any{"op": "no-such-op", "id": 2})
	if e := c.Expect("error", 10*time.Second); e["code"] != "unknown_op" {
		t.Fatalf("error %v", e)
	}
}
