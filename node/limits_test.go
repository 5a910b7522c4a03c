package node

import (
	"testing"
	"time"

	"github.com/rollcall/rollcall/protocol"
)

// TestMaxConnections: past the cap a connection is told "overloaded" and
// closed, the sessions already there are untouched, and a slot freed by a
// leaving client is usable again.
func TestMaxConnections(t *testing.T) {
	n := newTestNode(t, func(c *Config) { c.MaxConnections = 2 })
	a := dial(t, n)
	a.send(map[string]any{"op": "hello", "user": "ann", "device": "d"})
	a.expect("welcome")
	b := dial(t, n)
	b.send(map[string]any{"op": "hello", "user": "ben", "device": "d"})
	b.expect("welcome")

	c := dial(t, n)
	if f := c.recv(); f.str("code") != string(protocol.CodeOverloaded) {
		t.Fatalf("third connection got %v, want overloaded", f)
	}
	if _, err := c.tryRecv(2 * time.Second); err == nil {
		t.Fatal("the refused connection stayed open")
	}
	if got := n.Stats().Overloaded; got != 1 {
		t.Fatalf("overloaded counter = %d, want 1", got)
	}

	a.send(map[string]any{"op": "get", "users": []string{"ben"}, "id": 1})
	if p := a.expect("presence"); p["users"].([]any)[0].(map[string]any)["online"] != true {
		t.Fatalf("existing sessions harmed: %v", p)
	}

	b.send(map[string]any{"op": "bye", "id": 2})
	b.expect("ok")
	deadline := time.Now().Add(5 * time.Second)
	for n.Stats().Connections >= 2 {
		if time.Now().After(deadline) {
			t.Fatal("ben's connection never went away")
		}
		time.Sleep(5 * time.Millisecond)
	}
	d := dial(t, n)
	d.send(map[string]any{"op": "hello", "user": "dan", "device": "d"})
	d.expect("welcome")
}
