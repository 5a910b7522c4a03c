package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rollcall/rollcall/internal/testkit"
	"github.com/rollcall/rollcall/protocol"
)

// nextRaw returns the next item of r.Lines, failing the test after 15s or
// when Lines is closed.
func nextRaw(t testing.TB, r *RawClient) RawLine {
	t.Helper()
	select {
	case l, ok := <-r.Lines():
		if !ok {
			t.Fatal("Lines closed")
		}
		return l
	case <-time.After(15 * time.Second):
		t.Fatal("no line")
	}
	return RawLine{}
}

// rawOp is the op of a line, "" when it is not a JSON object with one.
func rawOp(line []byte) string {
	var h protocol.Head
	_ = json.Unmarshal(line, &h)
	return h.Op
}

// expectLinesEnd reads Lines until it closes and returns what it read.
func expectLinesEnd(t testing.TB, r *RawClient) []RawLine {
	t.Helper()
	var got []RawLine
	timeout := time.After(15 * time.Second)
	for {
		select {
		case l, ok := <-r.Lines():
			if !ok {
				return got
			}
			got = append(got, l)
		case <-timeout:
			t.Fatal("Lines not closed")
		}
	}
}

func dialRawT(t testing.TB, cfg Config) *RawClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := DialRaw(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// recorder is a DialFunc whose connections remember the lines written.
type recorder struct {
	mu      sync.Mutex
	written []string
}

type recordingConn struct {
	Conn
	r *recorder
}

func (c recordingConn) WriteLine(line []byte) error {
	c.r.mu.Lock()
	c.r.written = append(c.r.written, string(line))
	c.r.mu.Unlock()
	return c.Conn.WriteLine(line)
}

func (r *recorder) dial(ctx context.Context, addr string, tlsConfig *tls.Config) (Conn, error) {
	c, err := DialTCP(ctx, addr, tlsConfig)
	if err != nil {
		return nil, err
	}
	return recordingConn{Conn: c, r: r}, nil
}

func (r *recorder) count(line string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, w := range r.written {
		if w == line {
			n++
		}
	}
	return n
}

// TestRawLinesAndSend: the caller's lines go out as they are and every line
// the gateway sends comes back unparsed, the welcome first; the library
// says hello and heartbeats by itself and sends nothing else.
func TestRawLinesAndSend(t *testing.T) {
	gw := startNode(t, "g0")
	ctx := ctxT(t)
	var rec recorder
	r := dialRawT(t, Config{Addrs: []string{gw.ClientAddr().String()}, User: "alice", Device: "laptop", Status: "away", Dial: rec.dial})
	welcome := nextRaw(t, r)
	if rawOp(welcome.Data) != protocol.OpWelcome || !bytes.Contains(welcome.Data, []byte(`"device":"laptop"`)) {
		t.Fatalf("first line %q, want the welcome", welcome.Data)
	}
	if s, ok := r.Session(); !ok || s.Gateway != "g0" || s.Device != "laptop" {
		t.Fatalf("Session %+v %v", s, ok)
	}

	// Any id is the caller's: the library has no requests of its own in
	// flight to confuse them with.
	if err := r.Send(ctx, []byte(`{"op":"get","users":["alice"],"id":1}`)); err != nil {
		t.Fatal(err)
	}
	if l := nextRaw(t, r); !bytes.HasPrefix(l.Data, []byte(`{"op":"presence","id":1,`)) || !bytes.Contains(l.Data, []byte(`"status":"away"`)) {
		t.Fatalf("reply %q", l.Data)
	}
	// A refused request without an id comes back as the gateway sent it,
	// and does not end the session.
	if err := r.Send(ctx, []byte(`{"op":"status","status":"sleepy"}`)); err != nil {
		t.Fatal(err)
	}
	if l := nextRaw(t, r); !bytes.HasPrefix(l.Data, []byte(`{"op":"error","code":"bad_request",`)) || bytes.Contains(l.Data, []byte(`"id"`)) {
		t.Fatalf("refusal %q", l.Data)
	}
	if err := r.Send(ctx, []byte(`not json`)); err != nil {
		t.Fatal(err)
	}
	if l := nextRaw(t, r); !bytes.HasPrefix(l.Data, []byte(`{"op":"error","code":"bad_json",`)) {
		t.Fatalf("reply to a line that is not JSON: %q", l.Data)
	}

	// Heartbeats at the gateway's 200ms, without replies on Lines.
	waitFor(t, "two heartbeats", func() bool { return rec.count(`{"op":"hb"}`) >= 2 })

	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	rest := expectLinesEnd(t, r)
	if len(rest) != 1 || rawOp(rest[0].Data) != "ok" {
		t.Fatalf("lines after Close: %q", rest)
	}
	if r.Err() != nil {
		t.Fatalf("Err after Close = %v", r.Err())
	}
	if err := r.Send(ctx, []byte(`{"op":"hb"}`)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Send after Close = %v", err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, w := range rec.written {
		switch op := rawOp([]byte(w)); {
		case w == `{"op":"hb"}`, op == protocol.OpHello, w == `{"op":"bye"}`:
		case strings.Contains(w, `"id":1`), strings.Contains(w, "sleepy"), w == "not json":
		default:
			t.Errorf("the library sent %s", w)
		}
	}
}

// TestRawReconnect: a lost connection is marked on Lines, and the client is
// back with a new welcome and the previous epoch as last_epoch.
func TestRawReconnect(t *testing.T) {
	gw := startNode(t, "g0")
	ctx := ctxT(t)
	var cut cutter
	r := dialRawT(t, Config{Addrs: []string{gw.ClientAddr().String()}, User: "alice", Device: "laptop",
		Backoff: Backoff{Min: 10 * time.Millisecond, Max: 50 * time.Millisecond}, Dial: cut.dial})
	var first protocol.Welcome
	if err := json.Unmarshal(nextRaw(t, r).Data, &first); err != nil {
		t.Fatal(err)
	}
	// An error without an id that does not close the connection is not
	// taken for its end.
	if err := r.Send(ctx, []byte(`{"op":"status","status":"sleepy"}`)); err != nil {
		t.Fatal(err)
	}
	if l := nextRaw(t, r); rawOp(l.Data) != protocol.OpError {
		t.Fatalf("refusal %q", l.Data)
	}
	cut.cut()
	lost := nextRaw(t, r)
	if lost.Data != nil || lost.Lost == nil || HasCode(lost.Lost, protocol.CodeBadRequest) {
		t.Fatalf("after the cut: %+v", lost)
	}
	l := nextRaw(t, r)
	var again protocol.Welcome
	if rawOp(l.Data) != protocol.OpWelcome || json.Unmarshal(l.Data, &again) != nil || again.Device != "laptop" || again.Epoch <= first.Epoch {
		t.Fatalf("after the reconnect %q (first epoch %d)", l.Data, first.Epoch)
	}
	if err := r.Send(ctx, []byte(`{"op":"locate","user":"alice","id":"x"}`)); err != nil {
		t.Fatal(err)
	}
	if l := nextRaw(t, r); !bytes.HasPrefix(l.Data, []byte(`{"op":"locate","id":"x",`)) || bytes.Count(l.Data, []byte(`"session":`)) != 1 {
		t.Fatalf("locate after the reconnect: %q", l.Data)
	}
}

// TestRawBye: a bye sent as a raw line ends the session as Close does: its
// reply is the last line, and the client does not reconnect.
func TestRawBye(t *testing.T) {
	gw := startNode(t, "g0")
	ctx := ctxT(t)
	var cut cutter
	r := dialRawT(t, Config{Addrs: []string{gw.ClientAddr().String()}, User: "alice", Dial: cut.dial})
	nextRaw(t, r)
	if err := r.Send(ctx, []byte(`{"op":"bye","id":"b"}`)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.Done():
	default:
		t.Fatal("Send(bye) returned before the client stopped")
	}
	rest := expectLinesEnd(t, r)
	if len(rest) != 1 || string(rest[0].Data) != `{"op":"ok","id":"b"}` {
		t.Fatalf("lines after bye: %q", rest)
	}
	cut.mu.Lock()
	defer cut.mu.Unlock()
	if r.Err() != nil || cut.dials != 1 {
		t.Fatalf("after bye: Err %v, %d dials", r.Err(), cut.dials)
	}
}

// TestRawSuperseded: the closing error line is on Lines, then Lines closes
// and Err says superseded.
func TestRawSuperseded(t *testing.T) {
	gw := startNode(t, "g0")
	addr := []string{gw.ClientAddr().String()}
	r := dialRawT(t, Config{Addrs: addr, User: "alice", Device: "laptop"})
	nextRaw(t, r)
	dialT(t, Config{Addrs: addr, User: "alice", Device: "laptop"})
	rest := expectLinesEnd(t, r)
	if len(rest) != 1 || !bytes.HasPrefix(rest[0].Data, []byte(`{"op":"error","code":"superseded"`)) {
		t.Fatalf("lines of the superseded client: %q", rest)
	}
	<-r.Done()
	if !HasCode(r.Err(), protocol.CodeSuperseded) {
		t.Fatalf("Err = %v", r.Err())
	}
}

func TestRawSendRefusesBadLines(t *testing.T) {
	gw := startNode(t, "g0")
	ctx := ctxT(t)
	r := dialRawT(t, Config{Addrs: []string{gw.ClientAddr().String()}, User: "alice"})
	for _, line := range []string{"{\"op\":\"hb\"}\n{\"op\":\"hb\"}", "{\"op\":\"hb\"}\r", "", "   "} {
		if err := r.Send(ctx, []byte(line)); err == nil {
			t.Errorf("Send(%q) accepted", line)
		}
	}
}

func TestRawOverWebSocket(t *testing.T) {
	gw := startNodeHTTP(t, "g0")
	ctx := ctxT(t)
	r := dialRawT(t, Config{Addrs: []string{"ws://" + gw.HTTPAddr().String() + "/ws"}, User: "wendy"})
	if l := nextRaw(t, r); rawOp(l.Data) != protocol.OpWelcome {
		t.Fatalf("first line %q", l.Data)
	}
	if err := r.Send(ctx, []byte(`{"op":"hb","id":7}`)); err != nil {
		t.Fatal(err)
	}
	if l := nextRaw(t, r); !bytes.HasPrefix(l.Data, []byte(`{"op":"hb","id":7,`)) {
		t.Fatalf("reply %q", l.Data)
	}
}

// TestDialAttempts: with DialAttempts, Dial gives up after that many
// connects and returns the last one's error.
func TestDialAttempts(t *testing.T) {
	dead := testkit.FreeAddr(t)
	dials := 0
	count := func(ctx context.Context, addr string, tlsConfig *tls.Config) (Conn, error) {
		dials++
		return DialTCP(ctx, addr, tlsConfig)
	}
	_, err := DialRaw(ctxT(t), Config{Addrs: []string{dead, dead}, User: "alice", DialAttempts: 2,
		Backoff: Backoff{Min: time.Millisecond}, Dial: count})
	if !errors.Is(err, syscall.ECONNREFUSED) || !strings.Contains(err.Error(), dead) || dials != 2 {
		t.Fatalf("DialRaw to a closed port = %v after %d dials", err, dials)
	}
}

// TestClosesConnMatchesNode: the codes after which a RawClient takes an
// error without an id for its connection's end are the gateway's closing
// codes (and overloaded, sent before a connection is closed unread).
func TestClosesConnMatchesNode(t *testing.T) {
	for _, c := range []protocol.ErrorCode{protocol.CodeBadJSON, protocol.CodeLineTooLong, protocol.CodeUnknownOp, protocol.CodeBadRequest, protocol.CodeAuthFailed,
		protocol.CodeHandshakeTimeout, protocol.CodeNotAuthenticated, protocol.CodeSuperseded, protocol.CodeShuttingDown, protocol.CodeSlowConsumer,
		protocol.CodeExpired, protocol.CodeInternal, protocol.CodeEpochExhausted, protocol.CodeRateLimited, protocol.CodeForbidden,
		protocol.CodeTokenExpired, protocol.CodeTooManySessions, protocol.CodeTooManyConnections, "unsupported_protocol", protocol.CodeKicked} {
		if got, want := closesConn(c), protocol.ErrorCode(c).Closes(); got != want {
			t.Errorf("%s: closesConn %v, node %v", c, got, want)
		}
	}
	if !closesConn(protocol.CodeOverloaded) {
		t.Error("overloaded")
	}
}

// refusingConn is a gateway that refuses every connection with overloaded.
type refusingConn struct{ sent bool }

func (c *refusingConn) ReadLine() ([]byte, error) {
	if c.sent {
		return nil, io.EOF
	}
	c.sent = true
	return []byte(`{"op":"error","code":"overloaded","message":"full"}`), nil
}
func (c *refusingConn) WriteLine([]byte) error { return nil }
func (c *refusingConn) Close() error           { return nil }

// TestRawDialKeepsTheWelcome: the lines of refused attempts before the
// first welcome are on Lines, the oldest dropped when there are more than
// it holds, and the welcome never.
func TestRawDialKeepsTheWelcome(t *testing.T) {
	gw := startNode(t, "g0")
	refusals := rawBuffer + 50
	dials := 0
	dial := func(ctx context.Context, addr string, tlsConfig *tls.Config) (Conn, error) {
		if dials++; dials <= refusals {
			return &refusingConn{}, nil
		}
		return DialTCP(ctx, addr, tlsConfig)
	}
	r := dialRawT(t, Config{Addrs: []string{gw.ClientAddr().String()}, User: "alice", Dial: dial,
		Backoff: Backoff{Min: time.Microsecond, Max: time.Microsecond}})
	for n := 0; ; n++ {
		l := nextRaw(t, r)
		if rawOp(l.Data) == protocol.OpWelcome {
			if n != rawBuffer-1 {
				t.Fatalf("%d refusals before the welcome, want %d", n, rawBuffer-1)
			}
			return
		}
		if !bytes.Contains(l.Data, []byte(`"overloaded"`)) {
			t.Fatalf("line %d: %q", n, l.Data)
		}
	}
}
