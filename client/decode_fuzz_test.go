package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/rollcall/rollcall/protocol"
)

// FuzzClientLines plays a hostile gateway: the input is the lines it sends
// (one per input line). In a line, $ID stands for the id of the client's
// next request (the gateway waits for it), $LAST for the id of the last
// one taken (a duplicate reply). The client dials it, makes every kind of
// call and closes; the first input byte picks a Client or a RawClient. The
// client must turn whatever it reads into values or errors: it never
// panics, every call returns (an error or a value) long before its
// generous deadline, Close returns, and Done, Messages, subscription
// channels and Lines are closed after it. Seed corpus:
// testdata/fuzz/FuzzClientLines.
func FuzzClientLines(f *testing.F) {
	welcome := `{"op":"welcome","session":"s1","user":"me","device":"d","epoch":3,"gateway":"gw","heartbeat_ms":5000,"timeout_ms":15000,"protocol":1}`
	for _, s := range []string{
		"c" + welcome + "\n" + `{"op":"presence","id":$ID,"users":[{"user":"bob","status":"available"}]}` + "\n" +
			`{"op":"ok","id":$ID}` + "\n" + `{"op":"event","user":"bob","version":3,"status":"away"}` + "\n" +
			`{"op":"message","from":"bob","from_device":"x","body":{"a":1}}`,
		"c" + welcome + "\n" + `{"op":"ok","id":$ID}` + "\n" + `{"op":"ok","id":$LAST}` + "\n" + `{"op":"ok","id":$LAST}` + "\n" + `{"op":"ok","id":$LAST}`,
		"c" + `{"op":"error","code":"shutting_down","message":"bye","gateways":["a:1","b:2"]}`,
		"c" + `{"op":"welcome","heartbeat_ms":1,"token_expires_at":"2000-01-01T00:00:00Z"}` + "\n" + `{"op":"refresh","id":$ID,"token_expires_at":"1999-01-01T00:00:00Z"}`,
		"c" + welcome + "\n" + `{"op":"group","id":$ID,"group":7}` + "\n" + `{"op":"error","id":$ID,"code":"forbidden","message":"no"}` + "\n" + `{"op":"error","code":"superseded"}`,
		"c{\"op\":\n\xff\x00",
		"r" + welcome + "\n" + `{"op":"error","code":"line_too_long"}` + "\n" + `{"op":"hb","id":$ID}`,
		"r" + `{"op":"welcome","heartbeat_ms":-9223372036854775808}` + "\n" + "[1,2]\n\n\n" + `{"op":"event","group":"g","user":"u","version":18446744073709551615,"member":false}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		raw := data[0]%2 == 1
		lines := bytes.Split(data[1:], []byte("\n"))
		sc := newScriptConn(lines)
		var mu sync.Mutex
		dials := 0
		cfg := Config{
			Addrs: []string{"gw:1"}, User: "me", DialAttempts: 1, DialTimeout: 20 * time.Second,
			Backoff: Backoff{Min: time.Millisecond, Max: time.Millisecond},
			Token:   func(context.Context) (string, error) { return "token", nil },
			Dial: func(context.Context, string, *tls.Config) (Conn, error) {
				mu.Lock()
				defer mu.Unlock()
				dials++
				if dials == 1 {
					return sc, nil
				}
				// No second connection: a reconnect ends the client.
				return nil, &Error{Code: protocol.CodeSuperseded, Message: "no more connections"}
			},
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if raw {
			fuzzRawClient(t, ctx, cfg)
		} else {
			fuzzClient(t, ctx, cfg)
		}
		sc.Close()
	})
}

// hung fails the test when err is a call's deadline: nothing the gateway
// sends may leave a call waiting once the gateway has nothing more to say.
func hung(t *testing.T, what string, err error) {
	t.Helper()
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%s hung: %v", what, err)
	}
}

func fuzzClient(t *testing.T, ctx context.Context, cfg Config) {
	c, err := Dial(ctx, cfg)
	hung(t, "Dial", err)
	if err != nil {
		return
	}
	sub, err := c.Subscribe(ctx, "bob", "carol")
	hung(t, "Subscribe", err)
	gsub, err := c.SubscribeGroup(ctx, "g")
	hung(t, "SubscribeGroup", err)
	_, err = c.Get(ctx, "bob")
	hung(t, "Get", err)
	_, err = c.GetMany(ctx, "bob", "carol")
	hung(t, "GetMany", err)
	hung(t, "Status", c.Status(ctx, "away"))
	hung(t, "Join", c.Join(ctx, "g2"))
	_, err = c.Group(ctx, "g")
	hung(t, "Group", err)
	_, err = c.Locate(ctx, "bob")
	hung(t, "Locate", err)
	_, err = c.Send(ctx, "bob", map[string]int{"n": 1})
	hung(t, "Send", err)
	hung(t, "Leave", c.Leave(ctx, "g2"))
	if sub != nil {
		hung(t, "Subscription.Close", sub.Close(ctx))
	}
	c.Session()
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	select {
	case <-closed:
	case <-ctx.Done():
		t.Fatal("Close hung")
	}
	drained := func(what string, ch <-chan struct{}) {
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("%s not closed after Close", what)
		}
	}
	drained("Done", c.Done())
	drained("Messages", drain(c.Messages()))
	if gsub != nil {
		drained("group subscription Events", drain(gsub.Events()))
	}
	if sub != nil {
		drained("subscription Events", drain(sub.Events()))
	}
}

func fuzzRawClient(t *testing.T, ctx context.Context, cfg Config) {
	r, err := DialRaw(ctx, cfg)
	hung(t, "DialRaw", err)
	if err != nil {
		return
	}
	lines := drain(r.Lines())
	for _, l := range []string{`{"op":"get","users":["bob"],"id":1}`, `{"op":"sub","users":["bob"],"id":2}`, `{"op":"hb","id":3}`} {
		hung(t, "Send", r.Send(ctx, []byte(l)))
	}
	r.Session()
	closed := make(chan error, 1)
	go func() { closed <- r.Close() }()
	select {
	case <-closed:
	case <-ctx.Done():
		t.Fatal("Close hung")
	}
	select {
	case <-lines:
	case <-ctx.Done():
		t.Fatal("Lines not closed after Close")
	}
}

// drain reads ch until it is closed, and then closes the channel returned.
func drain[T any](ch <-chan T) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range ch {
		}
	}()
	return done
}

// scriptConn is a gateway that sends a script of lines, then closes the
// connection (io.EOF); it closes at once when the client says bye.
type scriptConn struct {
	lines [][]byte
	next  int

	reqs     chan string // ids of the client's requests, in order
	last     string
	welcomed bool
	done     chan struct{}
	once     sync.Once
}

func newScriptConn(lines [][]byte) *scriptConn {
	return &scriptConn{lines: lines, reqs: make(chan string, 1024), done: make(chan struct{}), last: "0"}
}

// ReadLine returns the script's next line, $ID replaced by the id of the
// client's next request (waited for once the script has sent a welcome;
// before it the client sends none) and $LAST by the last one taken.
func (s *scriptConn) ReadLine() ([]byte, error) {
	select {
	case <-s.done:
		return nil, net.ErrClosed
	default:
	}
	if s.next >= len(s.lines) {
		return nil, io.EOF
	}
	line := s.lines[s.next]
	s.next++
	if bytes.Contains(line, []byte("$ID")) {
		if s.welcomed {
			select {
			case s.last = <-s.reqs:
			case <-s.done:
				return nil, net.ErrClosed
			}
		}
		line = bytes.ReplaceAll(line, []byte("$ID"), []byte(s.last))
	}
	line = bytes.ReplaceAll(line, []byte("$LAST"), []byte(s.last))
	var h protocol.Head
	if json.Unmarshal(line, &h) == nil && h.Op == protocol.OpWelcome {
		s.welcomed = true
	}
	return line, nil
}

// WriteLine takes the id of each request that has one.
func (s *scriptConn) WriteLine(line []byte) error {
	select {
	case <-s.done:
		return net.ErrClosed
	default:
	}
	var h protocol.Head
	if json.Unmarshal(line, &h) != nil {
		return nil
	}
	if h.Op == protocol.OpBye {
		s.Close() // as a gateway does after bye
		return nil
	}
	if len(h.ID) > 0 {
		select {
		case s.reqs <- string(h.ID):
		default:
		}
	}
	return nil
}

func (s *scriptConn) Close() error {
	s.once.Do(func() { close(s.done) })
	return nil
}

// A gateway that answers one request several times must not stall the
// client's reader: the request takes the first reply, the others are
// dropped, and the reader goes on to the connection's end.
func TestDuplicateRepliesDoNotStallTheReader(t *testing.T) {
	dup := []byte(`{"op":"ok","id":1}`)
	sc := newScriptConn([][]byte{dup, dup, dup})
	c := &Client{log: zap.NewNop()}
	cn := newConn(c, sc, protocol.Welcome{}, "gw:1")
	ch := make(chan reply, 1)
	cn.pending["1"] = ch // a request waiting for its reply, not yet reading it
	go cn.readLoop()
	select {
	case <-cn.readDone:
	case <-time.After(10 * time.Second):
		t.Fatal("the reader stalled on a duplicate reply")
	}
	if r := <-ch; !bytes.Equal(r.line, dup) || r.err != nil {
		t.Fatalf("reply %q, %v", r.line, r.err)
	}
	if !errors.Is(cn.err(), io.EOF) {
		t.Fatalf("the connection ended with %v, want the gateway's EOF", cn.err())
	}
}
