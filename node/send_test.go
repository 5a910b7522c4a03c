package node

import (
	"encoding/json"
	"testing"
	"time"
	"unicode/utf8"
)

// recvRaw reads the next line as the gateway wrote it and fails the test
// unless it is one valid JSON object in valid UTF-8: what every client's
// parser relies on (encoding/json's own Unmarshal would quietly replace
// invalid bytes, so client.recv cannot tell).
func (c *client) recvRaw() frame {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := c.r.ReadBytes('\n')
	if err != nil {
		c.t.Fatalf("recv: %v", err)
	}
	if !utf8.Valid(line) || !json.Valid(line) {
		c.t.Fatalf("the gateway sent invalid JSON: %q", line)
	}
	var f frame
	if err := json.Unmarshal(line, &f); err != nil {
		c.t.Fatal(err)
	}
	return f
}

// TestSendRefusesInvalidBody: a body that is not valid JSON in UTF-8 is
// refused with bad_request at the sender's gateway, and the recipient
// receives nothing (issue 13, fault 7: bodies with invalid UTF-8 used to be
// forwarded byte for byte). The sender keeps its connection.
func TestSendRefusesInvalidBody(t *testing.T) {
	n := newTestNode(t, nil)
	a, _ := connect(t, n, "alice", "phone")
	b, _ := connect(t, n, "bob", "laptop")
	for i, body := range []string{
		"\"\xff\"", "\"caf\xc3\"", "{\"k\xfe\":1}", "[\"ok\",\"\xed\xa0\x80\"]", // bad bytes, a truncated rune, a surrogate as UTF-8
	} {
		a.sendRaw(`{"op":"send","to":"bob","id":` + utoa(uint64(i)) + `,"body":` + body + `}`)
		f := a.recvRaw()
		if f.str("op") != OpError || f.str("code") != string(CodeBadRequest) || f.num("id") != float64(i) {
			t.Fatalf("body %q: got %v, want bad_request with id %d", body, f, i)
		}
	}
	// Nothing reached bob: the next line he gets is the valid message.
	if f := a.ok(map[string]any{"op": "send", "to": "bob", "body": map[string]any{"text": "caf\u00e9 \u2603 <b>"}}); f.num("delivered") != 1 {
		t.Fatalf("valid send: %v", f)
	}
	f := b.recvRaw()
	if f.str("op") != OpMessage || f["body"].(map[string]any)["text"] != "caf\u00e9 \u2603 <b>" {
		t.Fatalf("bob got %v", f)
	}
	if got := n.Stats().Messages; got != 1 {
		t.Fatalf("%d messages delivered, want 1", got)
	}
}

// TestRepliesAreValidUTF8: nothing a client sends makes the gateway echo
// invalid UTF-8 back (ids are echoed verbatim; an id with invalid UTF-8 is
// refused, not echoed).
func TestRepliesAreValidUTF8(t *testing.T) {
	n := newTestNode(t, nil)
	c := dial(t, n)
	for _, line := range []string{
		"{\"op\":\"hello\",\"user\":\"u\xff\",\"id\":1}",
		"{\"op\":\"hello\",\"user\":\"u\",\"id\":\"\xff\"}",
		"{\"op\":\"nope\xff\",\"id\":2}",
	} {
		c.sendRaw(line)
		if f := c.recvRaw(); f.str("op") != OpError {
			t.Fatalf("%q: got %v", line, f)
		}
	}
	c.hello("u", "d")
	for _, line := range []string{
		"{\"op\":\"get\",\"users\":[\"a\"],\"id\":\"\xff\xfe\"}",
		"{\"op\":\"hb\",\"id\":\"\xc3\"}",
		"{\"op\":\"status\",\"status\":\"aw\xffay\",\"id\":3}",
		"{\"op\":\"join\",\"group\":\"g\xff\",\"id\":4}",
	} {
		c.sendRaw(line)
		f := c.recvRaw()
		if f.str("op") != OpError || f.str("code") != string(CodeBadRequest) {
			t.Fatalf("%q: got %v, want bad_request", line, f)
		}
	}
	c.ok(map[string]any{"op": "status", "status": "away"})
}

// TestDeliverLocalRefusesInvalidBody: routed messages come from peers, so
// the receiving gateway checks them too, and never writes a client a body
// that is not valid JSON in UTF-8.
func TestDeliverLocalRefusesInvalidBody(t *testing.T) {
	n := newTestNode(t, nil)
	b, _ := connect(t, n, "bob", "laptop")
	for _, body := range []string{"\"\xff\"", "{\"a\":\"\xc3\"}", "{", "1 2", "", "\"\x01\""} {
		if k := n.DeliverLocal(Message{To: "bob", From: "alice", FromDevice: "phone", Body: []byte(body)}); k != 0 {
			t.Fatalf("body %q delivered to %d sessions", body, k)
		}
	}
	// Names from a peer with invalid UTF-8 are not echoed as they came.
	if k := n.DeliverLocal(Message{To: "bob", From: "al\xffice", FromDevice: "ph\xfe", Body: []byte(" {\"x\" : [1, \"\u00e9\"]}\n")}); k != 1 {
		t.Fatalf("valid body delivered to %d sessions", k)
	}
	f := b.recvRaw()
	if f.str("op") != OpMessage || f.str("from") == "" {
		t.Fatalf("bob got %v", f)
	}
}
