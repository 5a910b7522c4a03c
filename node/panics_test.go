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
