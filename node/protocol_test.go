package node

import (
	"net"
	"strings"
	"testing"
	"time"
)

func TestErrorsBeforeHello(t *testing.T) {
	n := newTestNode(t, nil)
	c := dial(t, n)
	c.sendRaw(`{"op":"get","users":["bob"],"id":"q1"}`)
	if f := c.expectError(CodeNotAuthenticated); f.str("id") != "q1" {
		t.Fatalf("error %v", f)
	}
	c.sendRaw(`{"op":"hb"}`)
	c.expectError(CodeNotAuthenticated)
	c.sendRaw(`not json`)
	c.expectError(CodeBadJSON)
	c.sendRaw(`{"op":"hello"}`) // no user
	c.expectError(CodeBadRequest)
	c.sendRaw(`{"op":"hello","user":"a","status":"sleepy"}`)
	c.expectError(CodeBadRequest)
	// The connection is still usable.
	c.hello("alice", "phone")
}

func TestProtocolErrors(t *testing.T) {
	n := newTestNode(t, nil)
	c, _ := connect(t, n, "alice", "phone")
	cases := []struct {
		line string
		code ErrorCode
		id   any
	}{
		{`{"op":"status"`, CodeBadJSON, nil},
		{`[1,2]`, CodeBadJSON, nil},
		{`"hb"`, CodeBadJSON, nil},
		{`null`, CodeBadJSON, nil},
		{`{"op":"hb"} {"op":"hb"}`, CodeBadJSON, nil},
		{`{"op":"dance","id":4}`, CodeUnknownOp, 4.0},
		{`{"id":"x"}`, CodeBadRequest, "x"},
		{`{"op":"hb","id":{"a":1}}`, CodeBadRequest, nil},
		{`{"op":"hb","id":[1]}`, CodeBadRequest, nil},
		{`{"op":5,"id":"y"}`, CodeBadRequest, "y"},
		{`{"op":"get","users":"bob","id":"z"}`, CodeBadRequest, "z"},
		{`{"op":"hello","user":"alice","id":"h"}`, CodeBadRequest, "h"},
		{"{\"op\":\"status\",\"status\":\"away\xff\"}", CodeBadRequest, nil},
	}
	for _, tc := range cases {
		c.sendRaw(tc.line)
		f := c.expectError(tc.code)
		if f["id"] != tc.id {
			t.Errorf("%s: id %v, want %v", tc.line, f["id"], tc.id)
		}
		if f.str("message") == "" {
			t.Errorf("%s: no message", tc.line)
		}
	}
	// Blank lines and CRLF are fine; the connection survived everything.
	c.sendRaw("")
	c.sendRaw("   ")
	c.sendRaw("{\"op\":\"hb\",\"id\":1}\r")
	if f := c.recv(); f.str("op") != OpHB {
		t.Fatalf("hb %v", f)
	}
	if n.SessionCount() != 1 {
		t.Fatal("session lost")
	}
}

func TestLineTooLong(t *testing.T) {
	n := newTestNode(t, func(c *Config) { c.MaxLineBytes = 2048 })
	other, _ := connect(t, n, "bob", "phone")
	c, _ := connect(t, n, "alice", "phone")
	// Exactly the limit is fine.
	ok := `{"op":"hb","id":"` + strings.Repeat("x", 2048-len(`{"op":"hb","id":""}`)) + `"}`
	c.sendRaw(ok)
	if f := c.recv(); f.str("op") != OpHB {
		t.Fatalf("hb %v", f)
	}
	c.sendRaw(`{"op":"hb","id":"` + strings.Repeat("x", 100_000) + `"}`)
	c.expectError(CodeLineTooLong)
	c.expectClosed()
	other.call(map[string]any{"op": "hb"})
	waitFor(t, "alice to disconnect", func() bool { return !presenceOf(n, "alice").Online })
}

func TestHandshakeTimeout(t *testing.T) {
	n := newTestNode(t, func(c *Config) { c.HandshakeTimeout = 100 * time.Millisecond })
	c := dial(t, n)
	c.sendRaw(`{"op":"get","users":["x"]}`) // errors do not extend the deadline
	c.expectError(CodeNotAuthenticated)
	start := time.Now()
	c.expectError(CodeHandshakeTimeout)
	c.expectClosed()
	if time.Since(start) > 2*time.Second {
		t.Fatal("handshake timeout too late")
	}
	// A silent connection gets it too; a client that says hello in time
	// keeps its connection past the handshake timeout.
	quiet := dial(t, n)
	good, _ := connect(t, n, "alice", "phone")
	quiet.expectError(CodeHandshakeTimeout)
	time.Sleep(150 * time.Millisecond)
	if f := good.call(map[string]any{"op": "hb"}); f.str("op") != OpHB {
		t.Fatalf("hb %v", f)
	}
}

func TestShuttingDown(t *testing.T) {
	fc := &fakeCluster{}
	n := newTestNode(t, func(c *Config) { c.Cluster = fc })
	a, _ := connect(t, n, "alice", "phone")
	b, _ := connect(t, n, "bob", "phone")
	pending := dial(t, n) // not yet authenticated
	before := len(fc.published())
	done := make(chan error, 1)
	go func() { done <- n.Drain(t.Context()) }()
	for _, c := range []*client{a, b, pending} {
		c.expectError(CodeShuttingDown)
		c.expectClosed()
	}
	if err := <-done; err != nil {
		t.Fatalf("Drain: %v", err)
	}
	ds := fc.published()[before:]
	if len(ds) != 2 {
		t.Fatalf("published %d deltas on drain, want 2", len(ds))
	}
	for _, d := range ds {
		if d.Session == nil || d.Session.State.String() != "disconnected" {
			t.Fatalf("drain delta %+v", d)
		}
	}
	if n.SessionCount() != 0 || presenceOf(n, "alice").Online {
		t.Fatal("sessions left after drain")
	}
	if _, err := net.DialTimeout("tcp", n.ClientAddr().String(), time.Second); err == nil {
		t.Fatal("still accepting after drain")
	}
	if err := n.Drain(t.Context()); err != nil {
		t.Fatalf("second Drain: %v", err)
	}
}

// TestHelloProtocolVersion: hello may name the protocol version it speaks;
// the gateway speaks ProtocolVersion and refuses any other, closing.
func TestHelloProtocolVersion(t *testing.T) {
	n := newTestNode(t, nil)
	c := dial(t, n)
	if w := c.hello("alice", "a", map[string]any{"protocol": ProtocolVersion}); w.num("protocol") != ProtocolVersion {
		t.Fatalf("welcome %v", w)
	}
	c = dial(t, n)
	c.send(map[string]any{"op": "hello", "user": "bob", "protocol": ProtocolVersion + 1, "id": 1})
	if f := c.expectError(CodeUnsupportedProtocol); f.num("id") != 1 {
		t.Fatalf("error %v", f)
	}
	c.expectClosed()
	if p := presenceOf(n, "bob"); len(p.Sessions) != 0 {
		t.Fatalf("a session for a refused hello: %+v", p)
	}
}
