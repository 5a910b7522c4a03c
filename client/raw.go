package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"time"

	"github.com/rollcall/rollcall/protocol"
)

// RawClient is a session for a caller that speaks the protocol itself (a
// terminal client, a protocol test, a bridge to another transport): it
// writes the caller's request lines as they are and hands back every line
// the gateways send, unparsed, while the library keeps the session up as a
// Client does: hello (with Config's token, status and groups and the last
// epoch), heartbeats at the gateway's heartbeat_ms, reconnects with backoff
// and failover between Config.Addrs (a draining gateway's hints first),
// TLS, and ws:// and wss:// addresses.
//
// The library sends no request of its own besides hello, plain heartbeats
// (which get no reply unless refused, e.g. rate_limited) and bye, so every
// other reply on Lines answers a line the caller sent, whatever ids it
// chose. What the caller changes with its own
// lines (status, groups, subscriptions, a refreshed token) is not restored
// on a reconnect: hello carries Config's Status and Groups and a token from
// Config.Token, and the new connection's welcome on Lines is the caller's
// cue to send the rest again. A RawClient does not refresh tokens; send a
// refresh line, and make Config.Token return the new token for reconnects.
type RawClient struct {
	c *Client
}

// RawLine is one item of RawClient.Lines: a line a gateway sent, or the end
// of a connection the client is replacing.
type RawLine struct {
	// Data is the line as the gateway sent it, without its newline; nil
	// when Lost is set.
	Data []byte
	// Lost is set, with Data nil, after the last line of a connection that
	// ended while the client runs: why it ended (the closing error line's
	// *Error, or the transport's error). The client is reconnecting; the
	// next connection's lines follow, its welcome last of its handshake.
	Lost error
}

// rawBuffer is the capacity of RawClient.Lines.
const rawBuffer = 256

// rawStream carries a RawClient's lines from its connections to Lines.
type rawStream struct {
	lines chan RawLine
	// started is set at the first welcome: before, while DialRaw has not
	// returned and no one reads Lines, the oldest lines give way to the
	// newest.
	started atomic.Bool
}

// DialRaw connects as Dial does and returns a RawClient once a gateway has
// welcomed the session; the lines of that handshake (the welcome, and
// those of refused attempts before it, as many as Lines holds) are the
// first on Lines. Config.OnState is called as for a Client;
// Config.EventBuffer and MessageBuffer do not apply.
func DialRaw(ctx context.Context, cfg Config) (*RawClient, error) {
	s := &rawStream{lines: make(chan RawLine, rawBuffer)}
	c, err := dial(ctx, cfg, s)
	if err != nil {
		return nil, err
	}
	return &RawClient{c: c}, nil
}

// Lines delivers, in order, every line the gateways send on every
// connection (welcomes, replies, events, messages, errors), each
// connection's lines followed by a RawLine with Lost set when the client
// replaces it. It is closed when the client stops, after the last line.
//
// Lines must be read: it holds 256 lines, and while it is full the client
// reads nothing from the gateway (which ends a connection whose lines it
// cannot write with slow_consumer). Lines it cannot take when the client
// stops are dropped.
func (r *RawClient) Lines() <-chan RawLine { return r.c.raw.lines }

// Send writes line, one request without its newline, on the current
// connection as it is, waiting for a connection while the client
// reconnects (until ctx is done). It does not wait for a reply: that comes
// on Lines. A line that cannot be written returns ErrConnectionLost and is
// not sent again (the gateway may have read it). A bye request ends the
// session as Close does, and Send returns once the client has stopped.
// A line with a newline in it, or a blank one, is refused.
func (r *RawClient) Send(ctx context.Context, line []byte) error {
	if bytes.ContainsAny(line, "\r\n") {
		return errors.New("rollcall: a raw line must not contain a newline")
	}
	if len(bytes.TrimSpace(line)) == 0 {
		return errors.New("rollcall: a raw line must not be blank")
	}
	var h struct {
		Op string `json:"op"`
	}
	if json.Unmarshal(line, &h) == nil && h.Op == protocol.OpBye {
		return r.close(line)
	}
	cn, err := r.c.conn(ctx)
	if err != nil {
		return err
	}
	if err := cn.t.WriteLine(line); err != nil {
		cn.end(err)
		return ErrConnectionLost
	}
	return nil
}

// Session returns the current connection's session, and false while
// reconnecting.
func (r *RawClient) Session() (Session, bool) { return r.c.Session() }

// Done is closed when the client has stopped: after Close (or a bye sent
// with Send), or when the session was superseded or kicked (see Err).
func (r *RawClient) Done() <-chan struct{} { return r.c.Done() }

// Err is why the client stopped, as Client.Err.
func (r *RawClient) Err() error { return r.c.Err() }

// Close ends the session with bye, waits (up to 5s) for the gateway to
// close the connection, and stops the client; the bye's reply is the last
// line on Lines.
func (r *RawClient) Close() error { return r.close([]byte(`{"op":"bye"}`)) }

// byeWait bounds the wait for the gateway to close after bye.
const byeWait = 5 * time.Second

func (r *RawClient) close(bye []byte) error {
	c := r.c
	cn, first := c.beginClose()
	if !first {
		return nil
	}
	var err error
	if cn != nil {
		if cn.t.WriteLine(bye) == nil {
			t := time.NewTimer(byeWait)
			select {
			case <-cn.dead:
			case <-t.C:
				err = errors.New("rollcall: the gateway did not close the connection after bye")
			}
			t.Stop()
		}
		cn.close()
	}
	c.stop(nil)
	<-c.done
	return err
}

// deliver queues l on Lines, unless ctx ends while Lines is full.
func (s *rawStream) deliver(ctx context.Context, l RawLine) bool {
	if !s.started.Load() {
		// DialRaw's goroutine alone writes lines until the first welcome.
		for {
			select {
			case s.lines <- l:
				return true
			default:
			}
			select {
			case <-s.lines:
			default:
			}
		}
	}
	select {
	case s.lines <- l:
		return true
	default:
	}
	select {
	case s.lines <- l:
		return true
	case <-ctx.Done():
		return false
	}
}

// finish closes Lines once the last connection's lines are in.
func (s *rawStream) finish(last *conn) {
	if last != nil {
		<-last.readDone
	}
	close(s.lines)
}

// rawLine handles a line read in raw mode: a closing error without an id
// is the connection's cause of death; every line goes to Lines.
func (cn *conn) rawLine(line []byte) {
	var h protocol.Head
	if json.Unmarshal(line, &h) == nil && h.Op == protocol.OpError && len(h.ID) == 0 && closesConn(h.Code) {
		cn.mu.Lock()
		if cn.cause == nil {
			cn.cause = &Error{Code: h.Code, Message: h.Message, Gateways: h.Gateways}
		}
		cn.mu.Unlock()
	}
	cn.c.raw.deliver(cn.c.ctx, RawLine{Data: line})
}

// closesConn reports whether the gateway closes the connection after an
// error line with this code (docs/protocol.md#errors): a RawClient's own
// requests may be refused without an id too, and those errors do not.
func closesConn(code protocol.ErrorCode) bool {
	// overloaded refuses the connection, which closes at once.
	return code.Closes() || code == protocol.CodeOverloaded
}
