package node

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/protocol"
)

func TestErrorsBeforeHello(t *testing.T) {
	n := newTestNode(t, nil)
	c := dial(t, n)
	c.sendRaw(`{"op":"get","users":["bob"],"id":"q1"}`)
	if f := c.expectError(protocol.CodeNotAuthenticated); f.str("id") != "q1" {
		t.Fatalf("error %v", f)
	}
	c.sendRaw(`{"op":"hb"}`)
	c.expectError(protocol.CodeNotAuthenticated)
	c.sendRaw(`not json`)
	c.expectError(protocol.CodeBadJSON)
	c.sendRaw(`{"op":"hello"}`) // no user
	c.expectError(protocol.CodeBadRequest)
	c.sendRaw(`{"op":"hello","user":"a","status":"sleepy"}`)
	c.expectError(protocol.CodeBadRequest)
	// The connection is still usable.
	c.hello("alice", "phone")
}

func TestProtocolErrors(t *testing.T) {
	n := newTestNode(t, nil)
	c, _ := connect(t, n, "alice", "phone")
	cases := []struct {
		line string
		code protocol.ErrorCode
		id   any
	}{
		{`{"op":"status"`, protocol.CodeBadJSON, nil},
		{`[1,2]`, protocol.CodeBadJSON, nil},
		{`"hb"`, protocol.CodeBadJSON, nil},
		{`null`, protocol.CodeBadJSON, nil},
		{`{"op":"hb"} {"op":"hb"}`, protocol.CodeBadJSON, nil},
		{`{"op":"dance","id":4}`, protocol.CodeUnknownOp, 4.0},
		{`{"id":"x"}`, protocol.CodeBadRequest, "x"},
		{`{"op":"hb","id":{"a":1}}`, protocol.CodeBadRequest, nil},
		{`{"op":"hb","id":[1]}`, protocol.CodeBadRequest, nil},
		{`{"op":5,"id":"y"}`, protocol.CodeBadRequest, "y"},
		{`{"op":"get","users":"bob","id":"z"}`, protocol.CodeBadRequest, "z"},
		{`{"op":"hello","user":"alice","id":"h"}`, protocol.CodeBadRequest, "h"},
		{"{\"op\":\"status\",\"status\":\"away\xff\"}", protocol.CodeBadRequest, nil},
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
	if f := c.recv(); f.str("op") != protocol.OpHB {
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
	if f := c.recv(); f.str("op") != protocol.OpHB {
		t.Fatalf("hb %v", f)
	}
	c.sendRaw(`{"op":"hb","id":"` + strings.Repeat("x", 100_000) + `"}`)
	c.expectError(protocol.CodeLineTooLong)
	c.expectClosed()
	other.call(map[string]any{"op": "hb"})
	waitFor(t, "alice to disconnect", func() bool { return !presenceOf(n, "alice").Online })
}

func TestHandshakeTimeout(t *testing.T) {
	n := newTestNode(t, func(c *Config) { c.HandshakeTimeout = 100 * time.Millisecond })
	c := dial(t, n)
	c.sendRaw(`{"op":"get","users":["x"]}`) // errors do not extend the deadline
	c.expectError(protocol.CodeNotAuthenticated)
	start := time.Now()
	c.expectError(protocol.CodeHandshakeTimeout)
	c.expectClosed()
	if time.Since(start) > 2*time.Second {
		t.Fatal("handshake timeout too late")
	}
	// A silent connection gets it too; a client that says hello in time
	// keeps its connection past the handshake timeout.
	quiet := dial(t, n)
	good, _ := connect(t, n, "alice", "phone")
	quiet.expectError(protocol.CodeHandshakeTimeout)
	time.Sleep(150 * time.Millisecond)
	if f := good.call(map[string]any{"op": "hb"}); f.str("op") != protocol.OpHB {
		t.Fatalf("hb %v", f)
	}
}

func TestShuttingDown(t *testing.T) {
	fc := &fakeCluster{}
	n := newTestNode(t, func(c *Config) { c.Cluster = fc })
	a, _ := connect(t, n, "alice", "phone")
	b, _ := connect(t, n, "bob", "phone")
	pending := dial(t, n) // not yet authenticated
	// One still in the listener's backlog when Drain closes the listener
	// would be reset by the kernel.
	waitConns(t, n, 3)
	before := len(fc.published())
	done := make(chan error, 1)
	go func() { done <- n.Drain(t.Context()) }()
	for _, c := range []*client{a, b, pending} {
		c.expectError(protocol.CodeShuttingDown)
		c.expectClosed()
	}
	if err := <-done; err != nil {
		t.Fatalf("Drain: %v", err)
	}
	ds := fc.published()[before:]
	if len(ds) != 4 {
		t.Fatalf("published %d deltas on drain, want 4", len(ds))
	}
	for i, d := range ds { // each session's end, then its user's last seen
		if i%2 == 0 && (d.Session == nil || d.Session.State.String() != "disconnected") ||
			i%2 == 1 && (d.LastSeen == nil || d.LastSeen.User != ds[i-1].Session.User) {
			t.Fatalf("drain delta %d: %+v", i, d)
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
// the gateway speaks protocol.Version and refuses any other, closing.
func TestHelloProtocolVersion(t *testing.T) {
	n := newTestNode(t, nil)
	c := dial(t, n)
	if w := c.hello("alice", "a", map[string]any{"protocol": protocol.Version}); w.num("protocol") != protocol.Version {
		t.Fatalf("welcome %v", w)
	}
	c = dial(t, n)
	c.send(map[string]any{"op": "hello", "user": "bob", "protocol": protocol.Version + 1, "id": 1})
	if f := c.expectError(protocol.CodeUnsupportedProtocol); f.num("id") != 1 {
		t.Fatalf("error %v", f)
	}
	c.expectClosed()
	if p := presenceOf(n, "bob"); len(p.Sessions) != 0 {
		t.Fatalf("a session for a refused hello: %+v", p)
	}
}

// TestProtocolLimitsMatchCRDT: the protocol's name, group, epoch and status
// field limits
// are the ones the CRDT enforces, so a request within them is never
// refused by the state underneath.
func TestProtocolLimitsMatchCRDT(t *testing.T) {
	if protocol.MaxEpoch != crdt.MaxIssuedEpoch {
		t.Errorf("protocol.MaxEpoch %d, crdt.MaxIssuedEpoch %d", uint64(protocol.MaxEpoch), uint64(crdt.MaxIssuedEpoch))
	}
	if protocol.MaxGroups != crdt.MaxGroups {
		t.Errorf("protocol.MaxGroups %d, crdt.MaxGroups %d", protocol.MaxGroups, crdt.MaxGroups)
	}
	if protocol.MaxNameLen != crdt.MaxNameLen {
		t.Errorf("protocol.MaxNameLen %d, crdt.MaxNameLen %d", protocol.MaxNameLen, crdt.MaxNameLen)
	}
	if protocol.MaxStatusTextChars != crdt.MaxStatusTextChars || protocol.MaxStatusEmojiBytes != crdt.MaxStatusEmojiBytes ||
		protocol.MaxMetaBytes != crdt.MaxMetaBytes || protocol.MaxInfoBytes != crdt.MaxInfoBytes {
		t.Errorf("status limits differ: protocol %d/%d/%d/%d, crdt %d/%d/%d/%d",
			protocol.MaxStatusTextChars, protocol.MaxStatusEmojiBytes, protocol.MaxMetaBytes, protocol.MaxInfoBytes,
			crdt.MaxStatusTextChars, crdt.MaxStatusEmojiBytes, crdt.MaxMetaBytes, crdt.MaxInfoBytes)
	}
}
