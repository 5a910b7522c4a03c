package client

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/rollcall/rollcall/protocol"
)

// errLost is a request's fate when its connection ended before the reply.
var errLost = errors.New("rollcall: connection lost")

// conn is one connection to a gateway, after its welcome.
type conn struct {
	c       *Client
	t       Conn
	addr    string
	session string
	gateway string
	epoch   uint64

	dead      chan struct{} // closed when the connection has ended
	readDone  chan struct{} // closed when readLoop has returned
	closeOnce sync.Once

	mu      sync.Mutex
	nextID  uint64
	pending map[string]chan reply
	cause   error // why it ended: the closing error line, or the read error
}

type reply struct {
	line []byte
	err  error
}

func newConn(c *Client, t Conn, w protocol.Welcome, addr string) *conn {
	return &conn{c: c, t: t, addr: addr, session: w.Session, gateway: w.Gateway, epoch: w.Epoch,
		dead: make(chan struct{}), readDone: make(chan struct{}), pending: map[string]chan reply{}}
}

// end records why the connection ended (the first cause wins) and closes it.
func (cn *conn) end(cause error) {
	cn.mu.Lock()
	if cn.cause == nil {
		cn.cause = cause
	}
	cn.mu.Unlock()
	cn.closeOnce.Do(func() {
		cn.t.Close()
		close(cn.dead)
	})
}

func (cn *conn) close() { cn.end(errLost) }

func (cn *conn) err() error {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	return cn.cause
}

// roundTrip sends req with a fresh id and returns the reply line; an error
// line is returned as *Error, a connection that ends first as errLost.
func (cn *conn) roundTrip(ctx context.Context, req protocol.Request) ([]byte, error) {
	ch := make(chan reply, 1)
	cn.mu.Lock()
	cn.nextID++
	id := idString(cn.nextID)
	req.ID = json.RawMessage(id)
	cn.pending[id] = ch
	cn.mu.Unlock()
	defer func() {
		cn.mu.Lock()
		delete(cn.pending, id)
		cn.mu.Unlock()
	}()
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	select {
	case <-cn.dead:
		return nil, errLost
	default:
	}
	if err := cn.t.WriteLine(b); err != nil {
		cn.end(err)
		return nil, errLost
	}
	select {
	case r := <-ch:
		return r.line, r.err
	case <-cn.dead:
		// a reply read just before the end is still the answer
		select {
		case r := <-ch:
			return r.line, r.err
		default:
		}
		return nil, errLost
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// readLoop reads lines until the connection ends: replies go to their
// requests, events to subscriptions, messages to Messages.
func (cn *conn) readLoop() {
	defer close(cn.readDone)
	for {
		line, err := cn.t.ReadLine()
		if err != nil {
			cn.end(err)
			return
		}
		if len(line) == 0 {
			continue
		}
		if cn.c.raw != nil {
			cn.rawLine(line)
			continue
		}
		var h protocol.Head
		if err := json.Unmarshal(line, &h); err != nil {
			cn.c.log.Warn("rollcall: bad line from the gateway", zap.Error(err))
			continue
		}
		switch h.Op {
		case protocol.OpEvent:
			var ev protocol.Event
			if err := json.Unmarshal(line, &ev); err != nil {
				cn.c.log.Warn("rollcall: bad event", zap.Error(err))
				continue
			}
			cn.c.dispatch(&ev)
			continue
		case protocol.OpMessage:
			var m protocol.MessageFrame
			if err := json.Unmarshal(line, &m); err != nil {
				cn.c.log.Warn("rollcall: bad message", zap.Error(err))
				continue
			}
			cn.c.deliverMessage(&m)
			continue
		}
		var rerr error
		if h.Op == protocol.OpError {
			rerr = &Error{Code: h.Code, Message: h.Message, Gateways: h.Gateways}
		}
		if len(h.ID) == 0 {
			if rerr != nil {
				// Without an id: a closing error (the connection ends
				// next) or a refused plain heartbeat.
				cn.mu.Lock()
				if cn.cause == nil && h.Code != protocol.CodeRateLimited {
					cn.cause = rerr
				}
				cn.mu.Unlock()
				cn.c.log.Info("rollcall gateway error", zap.String("code", h.Code.String()), zap.String("message", h.Message))
			}
			continue
		}
		cn.mu.Lock()
		ch := cn.pending[string(h.ID)]
		cn.mu.Unlock()
		if ch != nil {
			// One reply per request: a duplicate (a hostile or broken
			// gateway) is dropped, never waited on, as no one may take it.
			select {
			case ch <- reply{line: line, err: rerr}:
			default:
			}
		}
	}
}

// heartbeat sends a plain hb every interval until the connection ends.
func (cn *conn) heartbeat(every time.Duration) {
	if every <= 0 {
		every = 5 * time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	hb := []byte(`{"op":"hb"}`)
	for {
		select {
		case <-cn.dead:
			return
		case <-t.C:
			if err := cn.t.WriteLine(hb); err != nil {
				cn.end(err)
				return
			}
		}
	}
}

// refreshLoop presents a new token at two thirds of the current one's
// remaining lifetime, until the connection ends.
func (cn *conn) refreshLoop(expiresAt string) {
	for {
		exp, err := time.Parse(time.RFC3339Nano, expiresAt)
		if err != nil {
			cn.c.log.Warn("rollcall: bad token_expires_at", zap.String("value", expiresAt))
			return
		}
		t := time.NewTimer(max(time.Until(exp)*2/3, 0))
		select {
		case <-cn.dead:
			t.Stop()
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), cn.c.cfg.DialTimeout)
		stop := context.AfterFunc(cn.c.ctx, cancel)
		token, err := cn.c.cfg.Token(ctx)
		var line []byte
		if err == nil {
			line, err = cn.roundTrip(ctx, protocol.Request{Op: protocol.OpRefresh, Token: token})
		}
		stop()
		cancel()
		if err != nil {
			cn.c.log.Warn("rollcall token refresh failed", zap.Error(err))
			if errors.Is(err, errLost) || cn.c.ctx.Err() != nil {
				return
			}
			// try again in a while; the gateway ends the session at exp
			expiresAt = time.Now().Add(3 * time.Second).Format(time.RFC3339Nano)
			if time.Until(exp) < 3*time.Second {
				return
			}
			continue
		}
		var ok protocol.RefreshReply
		if json.Unmarshal(line, &ok) != nil || ok.TokenExpiresAt == "" {
			return
		}
		expiresAt = ok.TokenExpiresAt
	}
}
