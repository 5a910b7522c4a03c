package node

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/protocol"
)

// recvRaw reads the next line as the gateway wrote it and fails the test
// unless it is one valid JSON object in valid UTF-8: what every client's
// parser relies on (encoding/json's own Unmarshal would quietly replace
// invalid bytes, so client.recv cannot tell).
func (c *client) recvRaw() frame {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := c.r.ReadLine()
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
// receives nothing (bodies with invalid UTF-8 used to be forwarded byte
// for byte). The sender keeps its connection.
func TestSendRefusesInvalidBody(t *testing.T) {
	n := newTestNode(t, nil)
	a, _ := connect(t, n, "alice", "phone")
	b, _ := connect(t, n, "bob", "laptop")
	for i, body := range []string{
		"\"\xff\"", "\"caf\xc3\"", "{\"k\xfe\":1}", "[\"ok\",\"\xed\xa0\x80\"]", // bad bytes, a truncated rune, a surrogate as UTF-8
	} {
		a.sendRaw(`{"op":"send","to":"bob","id":` + utoa(uint64(i)) + `,"body":` + body + `}`)
		f := a.recvRaw()
		if f.str("op") != protocol.OpError || f.str("code") != string(protocol.CodeBadRequest) || f.num("id") != float64(i) {
			t.Fatalf("body %q: got %v, want bad_request with id %d", body, f, i)
		}
	}
	// Nothing reached bob: the next line he gets is the valid message.
	if f := a.ok(map[string]any{"op": "send", "to": "bob", "body": map[string]any{"text": "caf\u00e9 \u2603 <b>"}}); f.num("delivered") != 1 {
		t.Fatalf("valid send: %v", f)
	}
	f := b.recvRaw()
	if f.str("op") != protocol.OpMessage || f["body"].(map[string]any)["text"] != "caf\u00e9 \u2603 <b>" {
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
		if f := c.recvRaw(); f.str("op") != protocol.OpError {
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
		if f.str("op") != protocol.OpError || f.str("code") != string(protocol.CodeBadRequest) {
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
	if f.str("op") != protocol.OpMessage || f.str("from") == "" {
		t.Fatalf("bob got %v", f)
	}
}

// floodSends writes count send lines to recipient from c, while a second
// goroutine reads c's replies, and returns how many were delivered (the sum
// of ok.delivered) and how many were refused with each error code. The
// sender reads its replies, so it is never a slow consumer itself.
func floodSends(t *testing.T, c *client, to string, count, bodyLen int) (delivered int, refused map[string]int) {
	t.Helper()
	line := `{"op":"send","to":"` + to + `","body":"` + strings.Repeat("x", bodyLen) + `"}` + "\n"
	const batch = 100
	werr := make(chan error, 1)
	go func() {
		chunk := strings.Repeat(line, batch)
		for sent := 0; sent < count; sent += batch {
			c.nc.SetWriteDeadline(time.Now().Add(30 * time.Second))
			if _, err := io.WriteString(c.nc, chunk[:len(line)*min(batch, count-sent)]); err != nil {
				werr <- err
				return
			}
		}
		werr <- nil
	}()
	refused = map[string]int{}
	errPrefix := []byte(`{"op":"error","code":"`)
	for range count {
		// A prompt reader: refusals are told apart by their prefix alone.
		c.nc.SetReadDeadline(time.Now().Add(30 * time.Second))
		line, err := c.r.ReadLine()
		if err != nil {
			t.Fatalf("sender: %v (after %d delivered, %v refused)", err, delivered, refused)
		}
		if rest, ok := bytes.CutPrefix(line, errPrefix); ok {
			if code, _, ok := bytes.Cut(rest, []byte(`"`)); ok && string(code) != string(protocol.CodeSlowConsumer) {
				refused[string(code)]++
				continue
			}
		}
		var f frame
		if err := json.Unmarshal(line, &f); err != nil {
			t.Fatalf("sender got %q: %v", line, err)
		}
		switch f.str("op") {
		case protocol.OpOK:
			delivered += int(f.num("delivered"))
		case protocol.OpError:
			refused[f.str("code")]++
		default:
			t.Fatalf("sender got %v", f)
		}
	}
	if err := <-werr; err != nil {
		t.Fatalf("sender write: %v", err)
	}
	return delivered, refused
}

// reader reads a client's frames in the background, counting messages and
// recording any error, until stopped.
type reader struct {
	c        *client
	messages atomic.Int64
	errs     chan frame
	done     chan struct{}
}

func readInBackground(c *client) *reader {
	r := &reader{c: c, errs: make(chan frame, 16), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for {
			c.nc.SetReadDeadline(time.Now().Add(time.Minute))
			line, err := c.r.ReadLine()
			if err != nil {
				return
			}
			var f frame
			if json.Unmarshal(line, &f) != nil || !utf8.Valid(line) {
				r.errs <- frame{"op": "invalid", "line": string(line)}
				continue
			}
			switch f.str("op") {
			case protocol.OpMessage:
				r.messages.Add(1)
			case protocol.OpError:
				r.errs <- f
			}
		}
	}()
	return r
}

// waitMessages waits until the reader has counted want messages, and fails
// on any error frame it saw.
func (r *reader) waitMessages(t *testing.T, want int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for r.messages.Load() < int64(want) {
		select {
		case f := <-r.errs:
			t.Fatalf("recipient got %v after %d messages", f, r.messages.Load())
		case <-r.done:
			t.Fatalf("recipient's connection ended after %d of %d messages", r.messages.Load(), want)
		case <-time.After(time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("recipient got %d of %d messages", r.messages.Load(), want)
		}
	}
	select {
	case f := <-r.errs:
		t.Fatalf("recipient got %v", f)
	default:
	}
}

// TestSendFloodIsThrottled: the flood's reproduction (a
// sender of 20,000 sends was never throttled while its victim, reading
// promptly, was cut as slow_consumer). The sender gets its burst, then
// rate_limited for every send past its allowance, and keeps its
// connection; the victim gets every delivered message and stays. The
// node's clock is fake and does not move, so the allowance is exactly the
// burst until the test moves it.
func TestSendFloodIsThrottled(t *testing.T) {
	fc := newFakeClock()
	n := newTestNode(t, func(c *Config) {
		c.Clock = fc
		c.SendRate = 10
		c.SendBurst = 25
	})
	mallory, _ := connect(t, n, "mallory", "bot")
	victim, _ := connect(t, n, "victim", "phone")
	r := readInBackground(victim)

	const flood = 20000
	delivered, refused := floodSends(t, mallory, "victim", flood, 200)
	if delivered != 25 || refused[string(protocol.CodeRateLimited)] != flood-25 || len(refused) != 1 {
		t.Fatalf("delivered %d, refused %v; want 25 delivered and %d rate_limited", delivered, refused, flood-25)
	}
	r.waitMessages(t, delivered)

	// The allowance refills at SendRate: 1s later, 10 more.
	fc.Advance(time.Second)
	delivered, refused = floodSends(t, mallory, "victim", 12, 10)
	if delivered != 10 || refused[string(protocol.CodeRateLimited)] != 2 {
		t.Fatalf("after 1s: delivered %d, refused %v; want 10 and 2 rate_limited", delivered, refused)
	}
	r.waitMessages(t, 35)
	// The refusal says what the limit is.
	f := mallory.call(map[string]any{"op": "send", "to": "victim", "body": 1})
	if f.str("code") != string(protocol.CodeRateLimited) || !strings.Contains(f.str("message"), "10 sends per second") {
		t.Fatalf("refusal %v", f)
	}
	// The sender's other requests are not limited, and both stay connected.
	mallory.ok(map[string]any{"op": "status", "status": "away"})
	victim.send(map[string]any{"op": "status", "status": "busy", "id": "v"})
	st := n.Stats()
	if st.SlowConsumers != 0 || st.RateLimited != flood-25+2+1 || st.Messages != 35 {
		t.Fatalf("stats: %d slow consumers, %d rate limited, %d messages", st.SlowConsumers, st.RateLimited, st.Messages)
	}
	if p := presenceOf(n, "victim"); !p.Online {
		t.Fatal("victim offline")
	}
}

// TestMessageFloodNeverCutsRecipient: messages from many sessions at once
// (here one sender with the limits off: the same for the recipient's queue)
// can outrun any recipient. Messages past the recipient's queue share are
// not delivered, and counted as such, but never make the recipient a slow
// consumer, even one that reads nothing until the flood is over.
func TestMessageFloodNeverCutsRecipient(t *testing.T) {
	n := newTestNode(t, func(c *Config) {
		c.SendRate = -1
		c.RequestRate = -1
		c.OutboundQueue = 64
		c.OutboundQueueBytes = 256 << 10
		// The recipient reads nothing until the flood is over: what is
		// tested is its queue, not how long its writer may wait.
		c.WriteTimeout = 5 * time.Minute
	})
	sender, _ := connect(t, n, "sender", "bot")
	victim, _ := connect(t, n, "victim", "phone")

	const flood = 5000 // 40 MB: far more than the socket buffers hold
	// The victim reads nothing but heartbeats, as a live client does: under
	// -race on a loaded machine the flood outlasts the timeout.
	stopBeating := keepBeating(victim, n.Config().Heartbeat)
	delivered, refused := floodSends(t, sender, "victim", flood, 8000)
	stopBeating()
	if len(refused) != 0 {
		t.Fatalf("refused %v", refused)
	}
	st := n.Stats()
	if st.SlowConsumers != 0 {
		t.Fatalf("the recipient was cut as a slow consumer (%d delivered)", delivered)
	}
	if delivered == flood || st.MessageDrops != uint64(flood-delivered) {
		t.Fatalf("%d of %d delivered, %d drops counted: the flood never filled the queue's message share", delivered, flood, st.MessageDrops)
	}
	// The recipient, reading now, gets every message delivered, then its reply.
	r := readInBackground(victim)
	r.waitMessages(t, delivered)
	victim.send(map[string]any{"op": "status", "status": "away"})
	waitFor(t, "the victim's status", func() bool { return presenceOf(n, "victim").Status == crdt.UserAway })
	if got := r.messages.Load(); got != int64(delivered) {
		t.Fatalf("victim got %d messages, %d delivered", got, delivered)
	}
}
