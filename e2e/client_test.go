package e2e

// A client of the gateway protocol (docs/protocol.md), as much as the drills
// need: TCP, one JSON object a line both ways; every request but hb gets
// exactly one reply, in order; event and message lines come at any time; a
// closing error (an error line without an id) comes just before the gateway
// closes the connection.

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/rollcall/rollcall/protocol"
)

// opOf returns the op of a line from the gateway.
func opOf(line []byte) (string, error) {
	var head struct {
		Op string `json:"op"`
	}
	err := json.Unmarshal(line, &head)
	return head.Op, err
}

// errClosed is a request whose connection ended before its reply.
var errClosed = errors.New("connection closed")

// requestTimeout bounds the wait for one reply.
const requestTimeout = 10 * time.Second

// client is one connection. A reader goroutine hands replies to request
// and events to onEvent; a heartbeat goroutine sends hb at the interval
// from welcome. Requests are made one at a time (the callers are
// sequential per client), so a reply is the next non-push line.
type client struct {
	// Static after dial.
	nc      net.Conn
	welcome protocol.Welcome
	onEvent func(protocol.Presence) // called from the reader goroutine

	wmu     sync.Mutex    // serializes writes
	replies chan []byte   // reply lines, for request
	done    chan struct{} // closed when the reader stops

	mu          sync.Mutex
	endCode     string   // the closing error code, or "eof"
	endGateways []string // the closing error's gateways (shutting_down)
}

// maxReplyLine bounds a line the client reads: a get or group reply is
// longer than any request.
const maxReplyLine = 16 << 20

// dial connects to a gateway's client address (over TLS with tc) and says
// hello; it returns once welcome arrives, or the gateway's error.
func dial(ctx context.Context, addr string, tc *tls.Config, h protocol.Request, onEvent func(protocol.Presence)) (*client, error) {
	var nc net.Conn
	var err error
	d := &net.Dialer{Timeout: 3 * time.Second}
	if tc != nil {
		nc, err = (&tls.Dialer{NetDialer: d, Config: tc}).DialContext(ctx, "tcp", addr)
	} else {
		nc, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return nil, err
	}
	h.Op = protocol.OpHello
	line, err := protocol.Marshal(h)
	if err != nil {
		nc.Close()
		return nil, err
	}
	nc.SetDeadline(time.Now().Add(requestTimeout))
	if _, err := nc.Write(line); err != nil {
		nc.Close()
		return nil, fmt.Errorf("hello to %s: %w", addr, err)
	}
	rd := protocol.NewReader(nc, 64<<10, maxReplyLine)
	raw, err := rd.ReadLine()
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("welcome from %s: %w", addr, err)
	}
	op, err := opOf(raw)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("welcome from %s: %w: %q", addr, err, raw)
	}
	if op != protocol.OpWelcome {
		nc.Close()
		var e protocol.ErrorFrame
		json.Unmarshal(raw, &e) //nolint:errcheck // the message shows the line's op either way
		return nil, fmt.Errorf("hello %s/%s at %s: got %s %s %s", h.User, h.Device, addr, op, e.Code, e.Message)
	}
	var w protocol.Welcome
	if err := json.Unmarshal(raw, &w); err != nil {
		nc.Close()
		return nil, fmt.Errorf("welcome from %s: %w: %q", addr, err, raw)
	}
	nc.SetDeadline(time.Time{})
	c := &client{nc: nc, welcome: w, onEvent: onEvent, replies: make(chan []byte, 16), done: make(chan struct{})}
	go c.readLoop(rd)
	go c.heartbeatLoop(time.Duration(w.HeartbeatMS) * time.Millisecond)
	return c, nil
}

func (c *client) readLoop(rd *protocol.Reader) {
	code := "eof"
	var gateways []string
	defer func() {
		c.mu.Lock()
		c.endCode, c.endGateways = code, gateways
		c.mu.Unlock()
		close(c.done)
	}()
	for {
		line, err := rd.ReadLine()
		if err != nil {
			return
		}
		raw := bytes.Clone(line) // a reply outlives the reader's buffer
		op, err := opOf(raw)
		if err != nil {
			code = "bad line: " + string(raw)
			return
		}
		switch op {
		case protocol.OpEvent:
			var ev protocol.Event
			if err := json.Unmarshal(raw, &ev); err != nil {
				code = "bad event: " + string(raw)
				return
			}
			if c.onEvent != nil {
				c.onEvent(ev.Presence)
			}
		case protocol.OpMessage:
		case protocol.OpError:
			var e protocol.ErrorFrame
			if err := json.Unmarshal(raw, &e); err != nil {
				code = "bad error: " + string(raw)
				return
			}
			if len(e.ID) > 0 {
				c.replies <- raw
				continue
			}
			// A closing error: the gateway closes the connection next.
			code, gateways = string(e.Code), e.Gateways
		default:
			c.replies <- raw
		}
	}
}

func (c *client) heartbeatLoop(every time.Duration) {
	if every <= 0 {
		every = time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
			if c.send(protocol.Request{Op: protocol.OpHB}) != nil {
				return
			}
		}
	}
}

func (c *client) write(line []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.nc.SetWriteDeadline(time.Now().Add(requestTimeout))
	_, err := c.nc.Write(protocol.AppendLine(make([]byte, 0, len(line)+1), line))
	return err
}

func (c *client) send(req protocol.Request) error {
	line, err := json.Marshal(req)
	if err != nil {
		return err
	}
	return c.write(line)
}

// request sends req (an "id" is added) and waits for its reply; an error
// reply is returned as an error carrying its code.
func (c *client) request(req protocol.Request) error {
	req.ID = json.RawMessage(strconv.Quote(strconv.FormatInt(time.Now().UnixNano(), 36)))
	if err := c.send(req); err != nil {
		return fmt.Errorf("%s: %w", req.Op, err)
	}
	var raw []byte
	select {
	case raw = <-c.replies:
	case <-c.done:
		// The reply may have come just before the close (bye's ok does).
		select {
		case raw = <-c.replies:
		default:
			return fmt.Errorf("%s: %w (%s)", req.Op, errClosed, c.end())
		}
	case <-time.After(requestTimeout):
		return fmt.Errorf("%s: no reply in %v", req.Op, requestTimeout)
	}
	if op, _ := opOf(raw); op == protocol.OpError {
		var e protocol.ErrorFrame
		if err := json.Unmarshal(raw, &e); err != nil {
			return fmt.Errorf("%s: bad error reply %q: %w", req.Op, raw, err)
		}
		return fmt.Errorf("%s: %s: %s", req.Op, e.Code, e.Message)
	}
	return nil
}

// end returns the closing error code ("eof" for a plain close), or "" while
// the connection is open.
func (c *client) end() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.endCode
}

// gatewaysOffered returns the other gateways a shutting_down listed.
func (c *client) gatewaysOffered() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.endGateways
}

// close closes the connection without a bye.
func (c *client) close() {
	c.nc.Close()
	<-c.done
}
