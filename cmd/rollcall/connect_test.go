package main

import (
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/rollcall/rollcall/client"
	"github.com/rollcall/rollcall/internal/testcluster"
	"github.com/rollcall/rollcall/protocol"
)

// renderLine is how `rollcall connect` prints one line from the gateway.
func renderLine(line string) string {
	m, err := decodeReply([]byte(line))
	if err != nil {
		return line
	}
	return formatReply(m)
}

// TestConnectPrintsEveryReply pins what `rollcall connect` prints for each
// line a gateway sends (docs/protocol.md), one case per op and shape.
func TestConnectPrintsEveryReply(t *testing.T) {
	for _, c := range []struct{ line, want string }{
		{`{"op":"welcome","session":"ses_1","user":"alice","device":"phone","epoch":7,"gateway":"gw1","heartbeat_ms":5000,"timeout_ms":15000,"expires_at":"2026-09-24T17:45:30.000Z","protocol":1,"token_expires_at":"2026-09-24T18:45:00Z"}`,
			"connected to gw1 as alice/phone (session ses_1, epoch 7); heartbeat every 5s, session expires after 15s of silence; token expires at 2026-09-24T18:45:00Z (refresh before)"},
		{`{"op":"welcome","session":"ses_2","user":"bob","device":"d","epoch":1,"gateway":"gw2","heartbeat_ms":250,"timeout_ms":1000,"expires_at":"x","protocol":1}`,
			"connected to gw2 as bob/d (session ses_2, epoch 1); heartbeat every 250ms, session expires after 1s of silence"},
		{`{"op":"ok","id":2}`, "ok"},
		{`{"op":"ok","delivered":2}`, "ok: delivered to 2 session(s)"},
		{`{"op":"ok","delivered":0}`, "ok: delivered to 0 session(s)"},
		{`{"op":"ok","id":"r","token_expires_at":"2026-09-24T19:45:00Z"}`, "ok: token expires at 2026-09-24T19:45:00Z"},
		{`{"op":"hb","id":"hb","expires_at":"2026-09-24T17:45:30.000Z"}`, "hb ok, session expires at 2026-09-24T17:45:30.000Z"},
		{`{"op":"presence","users":[{"user":"bob","online":true,"status":"busy","sessions":[{"session":"s1","device":"phone","epoch":3,"gateway":"n1","status":"busy"},{"session":"s2","device":"desktop","epoch":4,"gateway":"n2","status":"available"}],"version":9},{"user":"carol","online":false,"status":"offline","sessions":[],"version":0}]}`,
			"bob: busy (phone busy @n1, desktop available @n2)\ncarol: offline"},
		{`{"op":"presence","users":[]}`, ""},
		{`{"op":"group","group":"team","online":1,"members":[{"user":"alice","online":true,"status":"away","sessions":[{"session":"s","device":"phone","epoch":1,"gateway":"gw1","status":"away"}],"version":2}]}`,
			"group team: 1 online\n  alice: away (phone away @gw1)"},
		{`{"op":"group","group":"empty","online":0,"members":[]}`, "group empty: 0 online"},
		{`{"op":"locate","user":"alice","sessions":[{"session":"s1","device":"phone","epoch":5,"gateway":"gw1","status":"busy","gateway_addr":"gw1.example:7400"}]}`,
			"alice: 1 active session(s)\n  phone on gw1: s1, epoch 5, busy"},
		{`{"op":"event","user":"alice","online":true,"status":"available","sessions":[{"session":"s","device":"phone","epoch":1,"gateway":"gw1","status":"available"}],"version":4}`,
			"* alice: available (phone available @gw1)  (v4)"},
		{`{"op":"event","user":"alice","online":false,"status":"offline","sessions":[],"version":5}`, "* alice: offline  (v5)"},
		{`{"op":"event","user":"alice","online":true,"status":"busy","sessions":[{"session":"s","device":"phone","epoch":1,"gateway":"gw1","status":"busy"}],"version":6,"group":"team","member":true}`,
			"* [team] alice: busy (phone busy @gw1)  (v6)"},
		{`{"op":"event","user":"alice","online":true,"status":"busy","sessions":[],"version":7,"group":"team","member":false}`, "* [team] alice left the group"},
		{`{"op":"event","user":"alice","online":false,"status":"offline","sessions":[],"version":8,"group":"team","member":false}`, "* [team] alice is offline"},
		{`{"op":"event","user":"alice","online":false,"status":"offline","sessions":[],"version":9,"last_seen":"2026-09-24T16:02:11.348Z"}`,
			"* alice: offline, last seen 2026-09-24T16:02:11.348Z  (v9)"},
		{`{"op":"event","user":"alice","online":false,"status":"offline","sessions":[],"version":10,"group":"team","member":false,"last_seen":"2026-09-24T16:02:11.348Z"}`,
			"* [team] alice is offline, last seen 2026-09-24T16:02:11.348Z"},
		{`{"op":"message","from":"alice","from_device":"phone","body":"hello there"}`, "<alice/phone> hello there"},
		{`{"op":"message","from":"alice","from_device":"phone","body":{"x":1}}`, `<alice/phone> {"x":1}`},
		{`{"op":"error","code":"forbidden","message":"no","id":3}`, "error forbidden: no"},
		{`{"op":"error","code":"shutting_down","message":"bye","gateways":["10.0.0.2:7400","10.0.0.3:7400"]}`,
			"error shutting_down: bye (other gateways: 10.0.0.2:7400, 10.0.0.3:7400)"},
		// What this client does not know it prints as it came.
		{`not json`, "not json"},
		{`{"op":"future","x":1}`, `{"op":"future","x":1}`},
		{`{"op":"welcome","epoch":"seven"}`, `{"op":"welcome","epoch":"seven"}`},
	} {
		if got := renderLine(c.line); got != c.want {
			t.Errorf("%s:\n got %q\nwant %q", c.line, got, c.want)
		}
	}
}

// connectSession is a `rollcall connect` running against test gateways.
type connectSession struct {
	in   *io.PipeWriter
	out  *syncBuffer
	done chan error
}

func startConnect(t *testing.T, args ...string) *connectSession {
	t.Helper()
	s := &connectSession{out: &syncBuffer{}, done: make(chan error, 1)}
	r, w := io.Pipe()
	s.in = w
	go func() { s.done <- connectClient(t.Context(), args, r, s.out, io.Discard) }()
	t.Cleanup(func() { w.Close() })
	return s
}

// quit types bye and returns the exit error.
func (s *connectSession) quit(t *testing.T) error {
	t.Helper()
	fmt.Fprintln(s.in, "bye")
	select {
	case err := <-s.done:
		return err
	case <-time.After(15 * time.Second):
		t.Fatalf("connect did not exit after bye:\n%s", s.out.String())
	}
	return nil
}

// waitCount waits until want occurs n times in buf.
func waitCount(t *testing.T, what string, buf *syncBuffer, want string, n int) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for strings.Count(buf.String(), want) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %q not %d times in:\n%s", what, want, n, buf.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestConnectFailsOver: the gateway `rollcall connect` is on dies; it says
// so, reconnects to the next --addr, and sends again the subscriptions and
// status typed since connecting.
func TestConnectFailsOver(t *testing.T) {
	gs := testcluster.Start(t, 2, testcluster.Options{})
	addrs := gs[0].GW.ClientAddr().String() + "," + gs[1].GW.ClientAddr().String()
	alice := startConnect(t, "--addr", addrs, "--user", "alice", "--device", "phone", "--groups", "team")
	waitOutput(t, "welcome", alice.out, "connected to g0 as alice/phone")
	fmt.Fprintln(alice.in, "sub bob")
	waitOutput(t, "bob's snapshot", alice.out, "* bob: offline")
	fmt.Fprintln(alice.in, "status away")
	fmt.Fprintln(alice.in, "status away") // a repeat is sent again once
	waitCount(t, "the replies", alice.out, "ok\n", 3)

	gs[0].Kill()
	waitOutput(t, "the loss", alice.out, "-- connection lost (")
	waitOutput(t, "the failover", alice.out, "connected to g1 as alice/phone")
	waitOutput(t, "the requests sent again", alice.out, "-- sending again the 2 request(s) that changed")
	// The subscription is back: its snapshot comes again, from g1.
	waitCount(t, "the snapshot after the failover", alice.out, "* bob: offline", 2)
	fmt.Fprintln(alice.in, "get alice")
	waitOutput(t, "alice's status and group on g1", alice.out, "alice: away (phone away @g1)")
	fmt.Fprintln(alice.in, "group team")
	waitOutput(t, "the group on g1", alice.out, "group team: 1 online")
	if err := alice.quit(t); err != nil {
		t.Fatalf("exit: %v\n%s", err, alice.out.String())
	}
	if !strings.HasSuffix(alice.out.String(), "ok\n-- connection closed\n") {
		t.Fatalf("the end of the output:\n%s", alice.out.String())
	}
}

// TestConnectJSON: with --json every line the gateway sends is printed as
// it came, and a raw request line goes out as typed (its id echoed).
func TestConnectJSON(t *testing.T) {
	gs := testcluster.Start(t, 1, testcluster.Options{})
	s := startConnect(t, "--addr", gs[0].GW.ClientAddr().String(), "--user", "alice", "--device", "phone", "--json")
	waitOutput(t, "welcome", s.out, `{"op":"welcome","session":"`)
	fmt.Fprintln(s.in, `{"op":"locate","user":"alice","id":"q"}`)
	waitOutput(t, "the reply", s.out, `{"op":"locate","id":"q","user":"alice","sessions":[{"session":"`)
	fmt.Fprintln(s.in, "status busy")
	waitOutput(t, "ok", s.out, "\n{\"op\":\"ok\"}\n")
	fmt.Fprintln(s.in, `{"op":"nope"}`)
	waitOutput(t, "error", s.out, `{"op":"error","code":"unknown_op","message":"unknown op \"nope\""}`)
	if err := s.quit(t); err != nil {
		t.Fatal(err)
	}
}

// TestConnectOverWebSocket: a ws:// --addr is a gateway's /ws endpoint.
func TestConnectOverWebSocket(t *testing.T) {
	gs := testcluster.Start(t, 1, testcluster.Options{HTTP: true})
	s := startConnect(t, "--addr", gs[0].WS(), "--user", "wendy", "--device", "browser")
	waitOutput(t, "welcome", s.out, "connected to g0 as wendy/browser")
	fmt.Fprintln(s.in, "get wendy")
	waitOutput(t, "get", s.out, "wendy: available (browser available @g0)")
	if err := s.quit(t); err != nil {
		t.Fatal(err)
	}
}

// TestConnectSuperseded: another connection of the same user and device
// takes the session; connect exits with that reason instead of taking it
// back.
func TestConnectSuperseded(t *testing.T) {
	gs := testcluster.Start(t, 1, testcluster.Options{})
	args := []string{"--addr", gs[0].GW.ClientAddr().String(), "--user", "alice", "--device", "phone"}
	first := startConnect(t, args...)
	waitOutput(t, "welcome", first.out, "connected to g0 as alice/phone")
	second := startConnect(t, args...)
	waitOutput(t, "welcome", second.out, "connected to g0 as alice/phone")
	select {
	case err := <-first.done:
		if err == nil || !strings.HasPrefix(err.Error(), "gateway closed the session: superseded: ") {
			t.Fatalf("exit error %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("the superseded connect did not exit:\n%s", first.out.String())
	}
	if out := first.out.String(); !strings.HasSuffix(out, "-- connection closed\n") || !strings.Contains(out, "error superseded: ") {
		t.Fatalf("output:\n%s", out)
	}
	if err := second.quit(t); err != nil {
		t.Fatal(err)
	}
}

// TestConnectExitError: what connect exits with when the gateway refuses
// or ends the session.
func TestConnectExitError(t *testing.T) {
	err := exitError(fmt.Errorf("wrapped: %w", &client.Error{Code: protocol.CodeSuperseded, Message: "m"}))
	if err.Error() != "gateway closed the session: superseded: m" {
		t.Fatal(err)
	}
	if err := connectError(fmt.Errorf("x: %w", io.EOF), false); !strings.Contains(err.Error(), "--tls") {
		t.Fatalf("a connection closed before the welcome, without TLS: %v", err)
	}
	if err := connectError(fmt.Errorf("x: %w", io.EOF), true); strings.Contains(err.Error(), "--tls") {
		t.Fatalf("with TLS: %v", err)
	}
}
