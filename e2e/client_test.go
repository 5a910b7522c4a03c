package e2e

// A client of the gateway protocol (docs/protocol.md), as much as the drills
// need: TCP, one JSON object a line both ways; every request but hb gets
// exactly one reply, in order; event and message lines come at any time; a
// closing error (an error line without an id) comes just before the gateway
// closes the connection.

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/rollcall/rollcall/node"
)

// frame is any line a gateway sends; which fields are set depends on Op.
// node.Presence carries an event's presence and welcome's user.
type frame struct {
	Op          string          `json:"op"`
	ID          json.RawMessage `json:"id,omitempty"`
	Code        string          `json:"code,omitempty"`
	Message     string          `json:"message,omitempty"`
	Session     string          `json:"session,omitempty"`
	Device      string          `json:"device,omitempty"`
	Epoch       uint64          `json:"epoch,omitempty"`
	Gateway     string          `json:"gateway,omitempty"`
	HeartbeatMS int64           `json:"heartbeat_ms,omitempty"`
	TimeoutMS   int64           `json:"timeout_ms,omitempty"`
	Users       []node.Presence `json:"users,omitempty"`
	// Gateways, in shutting_down from a gateway with the lame-duck drain,
	// are the client addresses of the other live gateways.
	Gateways []string `json:"gateways,omitempty"`
	node.Presence
}

// hello is the first request of a connection.
type hello struct {
	Op        string   `json:"op"`
	User      string   `json:"user"`
	Device    string   `json:"device"`
	Token     string   `json:"token"`
	Status    string   `json:"status,omitempty"`
	LastEpoch uint64   `json:"last_epoch,omitempty"`
	Groups    []string `json:"groups,omitempty"`
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
	welcome frame
	onEvent func(node.Presence) // called from the reader goroutine

	wmu     sync.Mutex // serializes writes
	replies chan frame
	done    chan struct{} // closed when the reader stops

	mu          sync.Mutex
	endCode     string   // the closing error code, or "eof"
	endGateways []string // the closing error's gateways (shutting_down)
}

// dial connects to a gateway's client address (over TLS with tc) and says
// hello; it returns once welcome arrives, or the gateway's error.
func dial(ctx context.Context, addr string, tc *tls.Config, h hello, onEvent func(node.Presence)) (*client, error) {
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
	h.Op = "hello"
	line, err := json.Marshal(h)
	if err != nil {
		nc.Close()
		return nil, err
	}
	nc.SetDeadline(time.Now().Add(requestTimeout))
	if _, err := nc.Write(append(line, '\n')); err != nil {
		nc.Close()
		return nil, fmt.Errorf("hello to %s: %w", addr, err)
	}
	rd := bufio.NewReaderSize(nc, 64<<10)
	raw, err := rd.ReadBytes('\n')
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("welcome from %s: %w", addr, err)
	}
	var w frame
	if err := json.Unmarshal(raw, &w); err != nil {
		nc.Close()
		return nil, fmt.Errorf("welcome from %s: %w: %q", addr, err, raw)
	}
	if w.Op != "welcome" {
		nc.Close()
		return nil, fmt.Errorf("hello %s/%s at %s: got %s %s %s", h.User, h.Device, addr, w.Op, w.Code, w.Message)
	}
	nc.SetDeadline(time.Time{})
	c := &client{nc: nc, welcome: w, onEvent: onEvent, replies: make(chan frame, 16), done: make(chan struct{})}
	go c.readLoop(rd)
	go c.heartbeatLoop(time.Duration(w.HeartbeatMS) * time.Millisecond)
	return c, nil
}

func (c *client) readLoop(rd *bufio.Reader) {
	code := "eof"
	var gateways []string
	defer func() {
		c.mu.Lock()
		c.endCode, c.endGateways = code, gateways
		c.mu.Unlock()
		close(c.done)
	}()
	for {
		raw, err := rd.ReadBytes('\n')
		if err != nil {
			return
		}
		var f frame
		if err := json.Unmarshal(raw, &f); err != nil {
			code = "bad line: " + string(raw)
			return
		}
		switch {
		case f.Op == "event":
			if c.onEvent != nil {
				c.onEvent(f.Presence)
			}
		case f.Op == "message":
		case f.Op == "error" && len(f.ID) == 0:
			// A closing error: the gateway closes the connection next.
			code, gateways = f.Code, f.Gateways
		default:
			c.replies <- f
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
			if c.write([]byte(`{"op":"hb"}`)) != nil {
				return
			}
		}
	}
}

func (c *client) write(line []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.nc.SetWriteDeadline(time.Now().Add(requestTimeout))
	_, err := c.nc.Write(append(line, '\n'))
	return err
}

// request sends req (an "id" is added) and returns its reply; an error
// reply is returned as an error carrying its code.
func (c *client) request(req map[string]any) (frame, error) {
	req["id"] = strconv.FormatInt(time.Now().UnixNano(), 36)
	line, err := json.Marshal(req)
	if err != nil {
		return frame{}, err
	}
	if err := c.write(line); err != nil {
		return frame{}, fmt.Errorf("%v: %w", req["op"], err)
	}
	var f frame
	select {
	case f = <-c.replies:
	case <-c.done:
		// The reply may have come just before the close (bye's ok does).
		select {
		case f = <-c.replies:
		default:
			return frame{}, fmt.Errorf("%v: %w (%s)", req["op"], errClosed, c.end())
		}
	case <-time.After(requestTimeout):
		return frame{}, fmt.Errorf("%v: no reply in %v", req["op"], requestTimeout)
	}
	if f.Op == "error" {
		return f, fmt.Errorf("%v: %s: %s", req["op"], f.Code, f.Message)
	}
	return f, nil
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
