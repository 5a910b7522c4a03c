package main

import (
	"strings"
	"testing"
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

// TestConnectExitsWithEveryClosingError: every error code after which the
// gateway closes the connection becomes the client's exit error, so
// `rollcall connect` says why it ended.
func TestConnectExitsWithEveryClosingError(t *testing.T) {
	for _, code := range []string{"auth_failed", "handshake_timeout", "line_too_long", "superseded", "shutting_down",
		"slow_consumer", "expired", "token_expired", "too_many_sessions", "too_many_connections"} {
		cl := &interactive{out: &strings.Builder{}}
		cl.show([]byte(`{"op":"error","code":"` + code + `","message":"m"}`))
		if cl.closeErr == nil || cl.closeErr.Error() != "gateway closed the session: "+code+": m" {
			t.Errorf("%s: exit error %v", code, cl.closeErr)
		}
	}
	for _, code := range []string{"forbidden", "rate_limited", "bad_request"} {
		cl := &interactive{out: &strings.Builder{}}
		cl.show([]byte(`{"op":"error","code":"` + code + `","message":"m"}`))
		if cl.closeErr != nil {
			t.Errorf("%s ends the client: %v", code, cl.closeErr)
		}
	}
}
