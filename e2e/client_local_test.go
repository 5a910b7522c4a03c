package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/rollcall/rollcall/node"
	"github.com/rollcall/rollcall/protocol"
)

// TestClientAgainstInProcessGateway runs the drills' client against an
// in-process Dev gateway, so its decoding of each line it relies on
// (welcome, event, an error reply, ok, the closing error) is checked
// without Docker.
func TestClientAgainstInProcessGateway(t *testing.T) {
	n, err := node.New(node.Config{Name: "gw", Dev: true, ClientAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	addr := n.ClientAddr().String()

	events := make(chan protocol.Presence, 16)
	watcher, err := dial(t.Context(), addr, nil, protocol.Request{User: "bob", Device: "laptop"}, func(p protocol.Presence) { events <- p })
	if err != nil {
		t.Fatal(err)
	}
	if watcher.welcome.Epoch == 0 || watcher.welcome.User != "bob" || watcher.welcome.HeartbeatMS <= 0 {
		t.Fatalf("welcome %+v", watcher.welcome)
	}
	if err := watcher.request(protocol.Request{Op: protocol.OpSub, Users: []string{"alice"}}); err != nil {
		t.Fatal(err)
	}
	// waitEvent waits for an event showing alice's phone with status want
	// ("offline": no session).
	waitEvent := func(want string) {
		t.Helper()
		deadline := time.After(5 * time.Second)
		for {
			select {
			case p := <-events:
				if p.User == "alice" && (want == "offline" && !p.Online ||
					len(p.Sessions) == 1 && p.Sessions[0].Device == "phone" && p.Sessions[0].Status == want) {
					return
				}
			case <-deadline:
				t.Fatalf("no event of alice %s", want)
			}
		}
	}
	waitEvent("offline")

	alice, err := dial(t.Context(), addr, nil, protocol.Request{User: "alice", Device: "phone", Status: "away"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitEvent("away")
	if err := alice.request(protocol.Request{Op: protocol.OpStatus, Status: "busy"}); err != nil {
		t.Fatal(err)
	}
	waitEvent("busy")
	// An error reply (it carries the request's id) fails the request and
	// leaves the connection open.
	if err := alice.request(protocol.Request{Op: protocol.OpStatus, Status: "sleepy"}); err == nil || !strings.Contains(err.Error(), "bad_request") {
		t.Fatalf("status sleepy: %v", err)
	}
	if err := alice.request(protocol.Request{Op: protocol.OpBye}); err != nil {
		t.Fatal(err)
	}
	<-alice.done
	if end := alice.end(); end != "eof" {
		t.Fatalf("after bye: end %q", end)
	}
	waitEvent("offline")

	// A newer connection of bob's device closes the old one with
	// superseded: the closing error is the connection's end.
	again, err := dial(t.Context(), addr, nil, protocol.Request{User: "bob", Device: "laptop", LastEpoch: watcher.welcome.Epoch}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer again.close()
	<-watcher.done
	if end := watcher.end(); end != string(protocol.CodeSuperseded) {
		t.Fatalf("superseded connection: end %q", end)
	}
}
