package node

import (
	"runtime"
	"strconv"
	"testing"
)

// On Linux the event loop serves plain TCP clients: an idle session holds
// no goroutine of its own (docs/performance.md), where a connection served
// by goroutines holds its reader.
func TestIdleSessionsHoldNoGoroutine(t *testing.T) {
	if runtime.GOOS != "linux" || (testTransport != "tcp" && testTransport != "tcpgo") {
		t.Skip("the event loop serves plain TCP on Linux")
	}
	const sessions = 100
	n := newTestNode(t, nil)
	before := runtime.NumGoroutine()
	clients := make([]*client, sessions)
	for i := range clients {
		clients[i], _ = connect(t, n, "u"+strconv.Itoa(i), "d")
	}
	// Each session answers a request: its reader is alive.
	for _, c := range clients {
		c.sendRaw(`{"op":"hb","id":1}`)
		c.expect("hb")
	}
	added := runtime.NumGoroutine() - before
	if testTransport == "tcpgo" {
		if added < sessions {
			t.Fatalf("%d sessions served by goroutines added %d goroutines, want one each at least", sessions, added)
		}
		return
	}
	if added > sessions/10 {
		t.Fatalf("%d idle sessions on the event loop added %d goroutines, want none per session", sessions, added)
	}
}
