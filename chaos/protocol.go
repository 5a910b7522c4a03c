package chaos

// The client protocol, as much of it as the harness speaks (the reference
// is docs/protocol.md): TCP, one JSON object per line both ways. Requests
// carry a numeric "id" that the reply echoes, except hb, which is sent
// without one and gets no reply. event and message lines are pushed at any
// time. A closing error ({"op":"error","code":C} without an id) comes just
// before the gateway closes the connection.

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rollcall/rollcall/protocol"
)

// maxLine bounds a line the harness reads: a get of every workload user
// answers with one line of all their presences.
const maxLine = 4 << 20

// frame is a line from a gateway: its envelope, and the line itself, to
// decode as the reply or push it is.
type frame struct {
	protocol.Head
	line []byte
}

// decode decodes the line into v, a protocol reply or push; a line that
// does not fit leaves v's fields zero, as the harness treats a missing
// field.
func (f *frame) decode(v any) { _ = protocol.Unmarshal(f.line, v) }

// presence is an event's presence.
func (f *frame) presence() protocol.Presence {
	var ev protocol.Event
	f.decode(&ev)
	return ev.Presence
}

// presences are a get reply's presences.
func (f *frame) presences() []protocol.Presence {
	var r protocol.PresenceReply
	f.decode(&r)
	return r.Users
}

// delivered is a send reply's count of recipients, nil in other replies.
func (f *frame) delivered() *int {
	var ok protocol.OK
	f.decode(&ok)
	return ok.Delivered
}

// welcome is a hello's reply.
func (f *frame) welcome() protocol.Welcome {
	var w protocol.Welcome
	f.decode(&w)
	return w
}

// errReply is a request answered with an error line; Code is its code.
type errReply struct{ Code, Message string }

func (e *errReply) Error() string { return e.Code + ": " + e.Message }

// errClosed is a request whose connection ended before its reply.
var errClosed = errors.New("eof")

// errTimeout is a request not answered in time.
var errTimeout = errors.New("timeout")

// errCode returns the history's err text for a failed request.
func errCode(err error) string {
	var er *errReply
	if errors.As(err, &er) {
		return er.Code
	}
	return err.Error()
}

// clientConn is one client connection. One reader goroutine delivers
// replies to waiting requests and pushes to onPush; writes are serialized
// by wmu. After close or the reader's end, requests fail with errClosed.
type clientConn struct {
	// Static after newClientConn.
	id     int
	nc     net.Conn
	now    func() float64
	onPush func(f *frame, t float64) // event and message lines, from the reader

	wmu     sync.Mutex
	nextID  atomic.Int64
	mute    atomic.Bool   // stop reading (a silent client)
	closing chan struct{} // closed by close
	once    sync.Once
	done    chan struct{} // closed when the reader has stopped

	mu      sync.Mutex
	pending map[int64]chan *frame
	endCode string  // the closing error code, or "eof"
	endAt   float64 // when the reader stopped
}

// dialConn connects to a gateway's client address.
func dialConn(ctx context.Context, addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: 2 * time.Second}
	return d.DialContext(ctx, "tcp", addr)
}

func newClientConn(id int, nc net.Conn, now func() float64, onPush func(*frame, float64)) *clientConn {
	c := &clientConn{id: id, nc: nc, now: now, onPush: onPush, done: make(chan struct{}),
		closing: make(chan struct{}), pending: map[int64]chan *frame{}}
	go c.readLoop()
	return c
}

func (c *clientConn) readLoop() {
	defer close(c.done)
	lr := protocol.NewReader(c.nc, 64<<10, maxLine)
	code := "eof"
	for {
		line, err := lr.ReadLine()
		if err != nil {
			break
		}
		if c.mute.Load() {
			// A silent client reads nothing more; the bytes stay in the
			// socket until it is closed.
			<-c.closing
			break
		}
		t := c.now()
		var f frame
		if protocol.Unmarshal(line, &f.Head) != nil {
			continue
		}
		f.line = bytes.Clone(line)
		if len(f.ID) > 0 {
			id, _ := strconv.ParseInt(string(f.ID), 10, 64)
			c.mu.Lock()
			ch := c.pending[id]
			delete(c.pending, id)
			c.mu.Unlock()
			if ch != nil {
				ch <- &f
			}
			continue
		}
		switch f.Op {
		case protocol.OpEvent, protocol.OpMessage:
			if c.onPush != nil {
				c.onPush(&f, t)
			}
		case protocol.OpError:
			code = string(f.Code)
		}
	}
	c.mu.Lock()
	c.endCode, c.endAt = code, c.now()
	for id, ch := range c.pending {
		close(ch)
		delete(c.pending, id)
	}
	c.mu.Unlock()
	c.nc.Close()
}

func (c *clientConn) write(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.nc.SetWriteDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck // best effort
	_, err := c.nc.Write(b)
	return err
}

// request sends req (a JSON object without "id"; one is added) and waits
// for its reply up to timeout. It returns the reply, when the request was
// written and when the reply arrived (history times). An error reply is
// an *errReply.
func (c *clientConn) request(ctx context.Context, req map[string]any, timeout time.Duration) (*frame, float64, float64, error) {
	id := c.nextID.Add(1)
	req["id"] = id
	b, err := protocol.Marshal(req)
	if err != nil {
		return nil, 0, 0, err
	}
	ch := make(chan *frame, 1)
	c.mu.Lock()
	if c.endAt != 0 {
		c.mu.Unlock()
		return nil, c.now(), c.now(), errClosed
	}
	c.pending[id] = ch
	c.mu.Unlock()
	sent := c.now()
	if err := c.write(b); err != nil {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
		return nil, sent, c.now(), errClosed
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case f, ok := <-ch:
		t := c.now()
		if !ok {
			return nil, sent, t, errClosed
		}
		if f.Op == protocol.OpError {
			return f, sent, t, &errReply{Code: string(f.Code), Message: f.Message}
		}
		return f, sent, t, nil
	case <-timer.C:
		return nil, sent, c.now(), errTimeout
	case <-ctx.Done():
		return nil, sent, c.now(), ctx.Err()
	}
}

// heartbeat sends a plain hb and returns when it had been written: the
// time is taken after the write, so a starved client never claims a
// heartbeat earlier than the gateway could read it.
func (c *clientConn) heartbeat() (float64, error) {
	err := c.write([]byte("{\"op\":\"hb\"}\n"))
	return c.now(), err
}

// silence stops the connection reading; it stays open until close.
func (c *clientConn) silence() { c.mute.Store(true) }

// close closes the connection and waits for the reader to stop.
func (c *clientConn) close() {
	c.once.Do(func() { close(c.closing) })
	c.nc.Close()
	<-c.done
}

// end returns how the reader stopped: the closing error code or "eof",
// and when; ok is false while it still runs.
func (c *clientConn) end() (code string, at float64, ok bool) {
	select {
	case <-c.done:
	default:
		return "", 0, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.endCode, c.endAt, true
}

// helloReq builds a hello request.
func helloReq(user, device, status string, lastEpoch uint64, groups []string) map[string]any {
	m := map[string]any{"op": protocol.OpHello, "user": user, "device": device}
	if status != "" {
		m["status"] = status
	}
	if lastEpoch > 0 {
		m["last_epoch"] = lastEpoch
	}
	if len(groups) > 0 {
		m["groups"] = groups
	}
	return m
}
