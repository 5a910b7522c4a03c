package node

import (
	"testing"

	"github.com/rollcall/rollcall/protocol"
)

// TestPanicClosesOnlyItsConnection: a request that panics closes its own
// connection with an internal error line and is counted; the other
// sessions, on the event loop and on goroutines alike, go on being served,
// and new clients connect.
func TestPanicClosesOnlyItsConnection(t *testing.T) {
	for _, goroutines := range []bool{false, true} {
		name := "event loop"
		if goroutines {
			name = "goroutines"
		}
		t.Run(name, func(t *testing.T) {
			n, _ := newHookedTestNode(t, func(c *Config) { c.GoroutineIO = c.GoroutineIO || goroutines }, func(n *Node) {
				n.requestHook = func(req *protocol.Request) {
					if req.Op == protocol.OpGet && len(req.Users) == 1 && req.Users[0] == "boom" {
						panic("injected by the test")
					}
				}
			})
			bystander, _ := connect(t, n, "alice", "phone")
			victim, _ := connect(t, n, "bob", "desk")
			victim.send(map[string]any{"op": "get", "users": []string{"boom"}, "id": 1})
			if f := victim.expectError(protocol.CodeInternal); f.str("message") != internalErrorMessage {
				t.Fatalf("error line: %v", f)
			}
			victim.expectClosed()
			if f := bystander.call(map[string]any{"op": "get", "users": []string{"alice"}}); f.str("op") != protocol.OpPresence {
				t.Fatalf("the other session after the panic: %v", f)
			}
			connect(t, n, "carol", "tab")
			if m := n.Metrics(); m.Panics != 1 {
				t.Fatalf("panics counted: %d", m.Panics)
			}
		})
	}
}

// TestPanicUnderTheNodeLock: a request that panics while its handler holds
// the node's lock (get, group, sub, join: the query, subscription and
// session paths) releases the lock as the panic unwinds: its connection
// closes with an internal error, and the other sessions, on the event loop
// and on goroutines alike, go on being served, and new clients connect.
// (With the lock left held, every other request would wait forever.)
func TestPanicUnderTheNodeLock(t *testing.T) {
	for _, goroutines := range []bool{false, true} {
		name := "event loop"
		if goroutines {
			name = "goroutines"
		}
		t.Run(name, func(t *testing.T) {
			n, _ := newHookedTestNode(t, func(c *Config) { c.GoroutineIO = c.GoroutineIO || goroutines }, func(n *Node) {
				n.lockedHook = func(req *protocol.Request) {
					if req.Group == "boom" || (len(req.Users) == 1 && req.Users[0] == "boom") {
						panic("injected under the node lock by the test")
					}
				}
			})
			bystander, _ := connect(t, n, "alice", "phone")
			watcher, _ := connect(t, n, "carol", "desk")
			watcher.ok(map[string]any{"op": "sub", "users": []string{"alice"}})
			watcher.expectEvent("alice")
			for i, req := range []map[string]any{
				{"op": "get", "users": []string{"boom"}},
				{"op": "group", "group": "boom"},
				{"op": "sub", "group": "boom"},
				{"op": "join", "group": "boom"},
			} {
				victim, _ := connect(t, n, "bob", "desk")
				victim.send(req)
				victim.expectError(protocol.CodeInternal)
				victim.expectClosed()
				if f := bystander.call(map[string]any{"op": "get", "users": []string{"alice"}}); f.str("op") != protocol.OpPresence {
					t.Fatalf("%v: the other session after the panic: %v", req["op"], f)
				}
				// Writes and events still flow.
				status := []string{"away", "busy"}[i%2]
				bystander.ok(map[string]any{"op": "status", "status": status})
				if ev := watcher.expectEvent("alice"); ev.str("status") == "" {
					t.Fatalf("%v: event after the panic: %v", req["op"], ev)
				}
				connect(t, n, "dave", "tab")
				if m := n.Metrics(); m.Panics != uint64(i+1) {
					t.Fatalf("%v: panics counted: %d", req["op"], m.Panics)
				}
			}
		})
	}
}
