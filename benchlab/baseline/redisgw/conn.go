package redisgw

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/rollcall/rollcall/protocol"
)

// conn is one client connection.
type conn struct {
	g  *Gateway
	nc net.Conn

	qmu      sync.Mutex
	outq     [][]byte      // lines to write, at most OutboundQueue (qmu)
	qclose   bool          // close after the queued lines (qmu)
	wake     chan struct{} // tells the writer there is something queued
	ended    chan struct{} // closed when the connection is over
	failOnce sync.Once
	endOnce  sync.Once

	// Set at hello, then read-only.
	user, device, session string
	epoch                 uint64

	status   string          // this device's status (reader goroutine only)
	deadline atomic.Int64    // unix nanoseconds after which the session expires
	pending  *writeReq       // the last write queued (reader goroutine only)
	subs     map[string]bool // subscribed users (reader goroutine; g.mu for g.subs)
	noDelete atomic.Bool     // the session's key is not ours to delete (expired, superseded)
	closing  atomic.Bool     // a closing line is queued: the connection ends after it
}

// request is any client request: the protocol's, with the hello fields
// the baseline checks itself read raw (an exact whole number, a protocol
// named at all).
type request struct {
	protocol.Request
	LastEpoch json.Number `json:"last_epoch,omitempty"`
	Protocol  *int        `json:"protocol,omitempty"`
}

var plainHB = []byte(`{"op":"hb"}`)

// parseRequest decodes a request line. A returned id is kept even when the
// rest of the request is bad, so the error can carry it.
func parseRequest(line []byte) (request, protocol.ErrorCode, string) {
	var r request
	if err := json.Unmarshal(line, &r); err != nil {
		var probe map[string]json.RawMessage
		if json.Unmarshal(line, &probe) != nil {
			return r, protocol.CodeBadJSON, "the line is not a JSON object"
		}
		r = request{}
		if id, ok := probe["id"]; ok && validID(id) {
			r.ID = id
		}
		return r, protocol.CodeBadRequest, fmt.Sprintf("malformed request: %v", err)
	}
	if len(r.ID) > 0 && !validID(r.ID) {
		r.ID = nil
		return r, protocol.CodeBadRequest, "id must be a JSON string or number"
	}
	if r.Op == "" {
		return r, protocol.CodeBadRequest, "missing op"
	}
	return r, "", ""
}

func validID(id json.RawMessage) bool {
	var v any
	if json.Unmarshal(id, &v) != nil {
		return false
	}
	switch v.(type) {
	case string, float64:
		return true
	}
	return false
}

func validName(s string) bool {
	if len(s) == 0 || len(s) > protocol.MaxNameLen {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f || r == 0xfffd {
			return false
		}
	}
	return true
}

func validStatus(s string) bool { return s == "available" || s == "away" || s == "busy" }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (g *Gateway) serveConn(ctx context.Context, nc net.Conn) {
	c := &conn{g: g, nc: nc, wake: make(chan struct{}, 1), ended: make(chan struct{}),
		status: "available", subs: map[string]bool{}}
	// a small reader: the lines of a presence session are short; a longer
	// one is gathered in long, up to MaxLineBytes
	br := bufio.NewReaderSize(nc, 1<<10)
	var long []byte
	var wg sync.WaitGroup
	wg.Go(c.writer)
	defer func() {
		if c.closing.Load() {
			// the writer sends what is queued, then half-closes; reading
			// on until the client closes too (or a second passes) lets
			// the client read it rather than get a reset
			_ = nc.SetReadDeadline(time.Now().Add(time.Second))
			_, _ = io.Copy(io.Discard, br)
			wg.Wait()
		}
		c.end()
		wg.Wait()
		c.cleanup()
	}()
	stop := context.AfterFunc(ctx, func() { c.fail(protocol.CodeShuttingDown, "the gateway is shutting down", nil) })
	defer stop()

	_ = nc.SetReadDeadline(time.Now().Add(g.cfg.HandshakeTimeout))
	active := false
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			if len(long)+len(line) > g.cfg.MaxLineBytes+1 {
				c.fail(protocol.CodeLineTooLong, fmt.Sprintf("a line is at most %d bytes", g.cfg.MaxLineBytes), nil)
				return
			}
			long = append(long, line...)
			continue
		}
		if long != nil {
			line = append(long, line...)
			long = nil
		}
		if err != nil {
			if !active && errors.Is(err, os.ErrDeadlineExceeded) {
				c.fail(protocol.CodeHandshakeTimeout, fmt.Sprintf("no hello within %v", g.cfg.HandshakeTimeout), nil)
				return
			}
			if len(line) == 0 || errors.Is(err, os.ErrDeadlineExceeded) {
				return
			}
			// a last line without a newline: served, then the loop ends
		}
		if c.closing.Load() {
			return // closing: what the client sends now is not read
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) > g.cfg.MaxLineBytes {
			c.fail(protocol.CodeLineTooLong, fmt.Sprintf("a line is at most %d bytes", g.cfg.MaxLineBytes), nil)
			return
		}
		if len(bytes.TrimSpace(line)) == 0 {
			if err != nil {
				return
			}
			continue
		}
		if active && bytes.Equal(line, plainHB) {
			c.touch()
			c.heartbeat(ctx)
			continue
		}
		r, code, msg := parseRequest(line)
		if code != "" {
			c.reply(errorLine(code, msg, r.ID))
			continue
		}
		if !active {
			if r.Op != protocol.OpHello {
				c.reply(errorLine(protocol.CodeNotAuthenticated, "say hello first", r.ID))
				continue
			}
			if c.hello(ctx, r) {
				active = true
				_ = nc.SetReadDeadline(time.Time{})
			}
			continue
		}
		c.touch()
		if !c.handle(ctx, r) {
			return
		}
		if err != nil {
			return
		}
	}
}

func (c *conn) touch() {
	c.deadline.Store(time.Now().Add(c.g.cfg.Timeout).UnixNano())
}

// hello opens the session; false leaves the connection waiting for another
// hello.
func (c *conn) hello(ctx context.Context, r request) bool {
	g := c.g
	if r.Protocol != nil && *r.Protocol != 1 {
		c.fail(protocol.CodeUnsupportedProtocol, fmt.Sprintf("this gateway speaks protocol 1, not %d", *r.Protocol), r.ID)
		return false
	}
	if !validName(r.User) {
		c.reply(errorLine(protocol.CodeBadRequest, "user must be 1-256 bytes without control characters", r.ID))
		return false
	}
	device := r.Device
	if device == "" {
		device = "dev-" + randomHex(8)
	} else if !validName(device) {
		c.reply(errorLine(protocol.CodeBadRequest, "device must be 1-256 bytes without control characters", r.ID))
		return false
	}
	status := "available"
	if r.Status != "" {
		if !validStatus(r.Status) {
			c.reply(errorLine(protocol.CodeBadRequest, fmt.Sprintf("unknown device status %q (want available, away or busy)", r.Status), r.ID))
			return false
		}
		status = r.Status
	}
	var last uint64
	if r.LastEpoch != "" {
		v, err := parseEpoch(r.LastEpoch)
		if err != nil {
			c.reply(errorLine(protocol.CodeBadRequest, err.Error(), r.ID))
			return false
		}
		last = v
	}
	session := "ses_" + randomHex(8)
	now := time.Now()
	epoch, err := g.st.hello(ctx, r.User, device, uint64(now.UnixMilli()), last, g.cfg.Timeout.Milliseconds(),
		value(status, session, g.cfg.Name))
	if errors.Is(err, errEpochExhausted) {
		c.reply(errorLine(protocol.CodeEpochExhausted, "this (user, device) has used up its epochs; say hello with another device", r.ID))
		return false
	}
	if err != nil {
		g.log.Warn("hello", zap.Error(err))
		c.reply(errorLine(protocol.CodeInternal, "the presence store failed", r.ID))
		return false
	}
	c.user, c.device, c.session, c.epoch, c.status = r.User, device, session, epoch, status
	c.touch()
	g.mu.Lock()
	g.conns[c] = struct{}{}
	g.mu.Unlock()
	w := protocol.Welcome{Op: protocol.OpWelcome, ID: r.ID, Session: session, User: r.User, Device: device, Epoch: epoch,
		Gateway: g.cfg.Name, HeartbeatMS: g.cfg.Heartbeat.Milliseconds(), TimeoutMS: g.cfg.Timeout.Milliseconds(),
		ExpiresAt: formatTime(now.Add(g.cfg.Timeout)), Protocol: protocol.Version}
	b, _ := json.Marshal(w)
	c.reply(b)
	return true
}

func parseEpoch(n json.Number) (uint64, error) {
	var v uint64
	if _, err := fmt.Sscan(string(n), &v); err != nil || fmt.Sprint(v) != string(n) {
		return 0, fmt.Errorf("last_epoch must be a whole number below %d", uint64(protocol.MaxEpoch))
	}
	if v >= protocol.MaxEpoch {
		return 0, fmt.Errorf("last_epoch must be below %d", uint64(protocol.MaxEpoch))
	}
	return v, nil
}

func formatTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }

// waitPending waits for the connection's last queued write.
func (c *conn) waitPending() *writeReq {
	p := c.pending
	if p == nil {
		return nil
	}
	select {
	case <-p.done:
	case <-c.ended:
		<-p.done
	}
	return p
}

// queue hands a write of the session's current state to the pipelines.
func (c *conn) queue(ctx context.Context, publish bool) *writeReq {
	r := &writeReq{c: c, val: value(c.status, c.session, c.g.cfg.Name), publish: publish, done: make(chan struct{})}
	select {
	case c.g.writes <- r:
	case <-ctx.Done():
		r.err = ctx.Err()
		close(r.done)
	}
	c.pending = r
	return r
}

// heartbeat queues a plain heartbeat's write; the result comes back to
// done (a superseded session is closed by the pipeline). While the
// previous write is still queued, it carries this heartbeat too.
func (c *conn) heartbeat(ctx context.Context) {
	if p := c.pending; p != nil {
		select {
		case <-p.done:
		default:
			return
		}
	}
	c.queue(ctx, false)
}

// written is what a finished write means for the connection: false if it
// ended the connection.
func (c *conn) written(r *writeReq, id json.RawMessage) bool {
	if r.err != nil {
		c.g.log.Warn("session write", zap.Error(r.err))
		c.reply(errorLine(protocol.CodeInternal, "the presence store failed", id))
		return true
	}
	if !r.ok {
		c.supersede()
		return false
	}
	return true
}

func (c *conn) supersede() {
	c.noDelete.Store(true)
	c.fail(protocol.CodeSuperseded, "a newer connection of this device took over the session", nil)
}

// handle serves one request of an active session; false ends the
// connection.
func (c *conn) handle(ctx context.Context, r request) bool {
	g := c.g
	switch r.Op {
	case protocol.OpHB:
		c.waitPending()
		w := c.queue(ctx, false)
		<-w.done
		if !c.written(w, r.ID) || w.err != nil {
			return w.err != nil
		}
		if len(r.ID) > 0 {
			b, _ := json.Marshal(protocol.HBReply{Op: protocol.OpHB, ID: r.ID, ExpiresAt: formatTime(time.Now().Add(g.cfg.Timeout))})
			c.reply(b)
		}
	case protocol.OpStatus:
		if !validStatus(r.Status) {
			c.reply(errorLine(protocol.CodeBadRequest, fmt.Sprintf("unknown device status %q (want available, away or busy)", r.Status), r.ID))
			return true
		}
		c.waitPending()
		c.status = r.Status
		w := c.queue(ctx, true)
		<-w.done
		if !c.written(w, r.ID) {
			return false
		}
		if w.err == nil {
			c.reply(okLine(r.ID))
		}
	case protocol.OpSub, protocol.OpUnsub, protocol.OpGet:
		if len(r.Users) == 0 || len(r.Users) > protocol.MaxUsersPerRequest {
			c.reply(errorLine(protocol.CodeBadRequest, fmt.Sprintf("%s needs 1-%d users", r.Op, protocol.MaxUsersPerRequest), r.ID))
			return true
		}
		for _, u := range r.Users {
			if !validName(u) {
				c.reply(errorLine(protocol.CodeBadRequest, "a user must be 1-256 bytes without control characters", r.ID))
				return true
			}
		}
		switch r.Op {
		case protocol.OpSub:
			added := 0
			for _, u := range r.Users {
				if !c.subs[u] {
					added++
				}
			}
			if len(c.subs)+added > protocol.MaxSubscriptions {
				c.reply(errorLine(protocol.CodeBadRequest, fmt.Sprintf("at most %d subscriptions per connection", protocol.MaxSubscriptions), r.ID))
				return true
			}
			g.mu.Lock()
			for _, u := range r.Users {
				c.subs[u] = true
				if g.subs[u] == nil {
					g.subs[u] = map[*conn]struct{}{}
				}
				g.subs[u][c] = struct{}{}
			}
			g.mu.Unlock()
			c.reply(okLine(r.ID))
			g.sendEvents(ctx, r.Users, c)
		case protocol.OpUnsub:
			g.mu.Lock()
			for _, u := range r.Users {
				c.unsubLocked(u)
			}
			g.mu.Unlock()
			c.reply(okLine(r.ID))
		case protocol.OpGet:
			sts, err := g.st.presences(ctx, r.Users)
			if err != nil {
				g.log.Warn("get", zap.Error(err))
				c.reply(errorLine(protocol.CodeInternal, "the presence store failed", r.ID))
				return true
			}
			ps := make([]protocol.Presence, len(r.Users))
			v := g.nextVersion()
			for i, u := range r.Users {
				ps[i] = makePresence(u, sts[i], v)
			}
			b, _ := json.Marshal(protocol.PresenceReply{Op: protocol.OpPresence, ID: r.ID, Users: ps})
			c.reply(b)
		}
	case protocol.OpBye:
		c.reply(okLine(r.ID))
		c.closeAfterWrites()
		return false
	case protocol.OpHello:
		c.reply(errorLine(protocol.CodeBadRequest, "already said hello", r.ID))
	case protocol.OpAccount, protocol.OpJoin, protocol.OpLeave, protocol.OpGroup, protocol.OpLocate, protocol.OpSend, protocol.OpRefresh:
		c.reply(errorLine(protocol.CodeBadRequest, fmt.Sprintf("%s is not supported by the Redis baseline gateway", r.Op), r.ID))
	default:
		c.reply(errorLine(protocol.CodeUnknownOp, fmt.Sprintf("unknown op %q", r.Op), r.ID))
	}
	return true
}

// unsubLocked drops a subscription; g.mu held.
func (c *conn) unsubLocked(u string) {
	delete(c.subs, u)
	if m := c.g.subs[u]; m != nil {
		delete(m, c)
		if len(m) == 0 {
			delete(c.g.subs, u)
		}
	}
}

// reply queues a reply (from the reader goroutine).
func (c *conn) reply(b []byte) { c.push(b) }

// push queues a line; a client whose queue is full is dropped.
func (c *conn) push(b []byte) {
	c.qmu.Lock()
	if c.qclose {
		c.qmu.Unlock()
		return
	}
	if len(c.outq) >= c.g.cfg.OutboundQueue {
		c.qmu.Unlock()
		c.g.log.Info("slow consumer dropped", zap.String("user", c.user), zap.String("code", protocol.CodeSlowConsumer.String()))
		c.end()
		return
	}
	c.outq = append(c.outq, b)
	c.qmu.Unlock()
	c.signal()
}

func (c *conn) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// fail sends a closing error and closes the connection after it.
func (c *conn) fail(code protocol.ErrorCode, msg string, id json.RawMessage) {
	c.failOnce.Do(func() {
		if code == protocol.CodeExpired {
			c.noDelete.Store(true)
		}
		c.push(errorLine(code, msg, id))
		c.closeAfterWrites()
	})
}

// closeAfterWrites closes the connection once what is queued is written.
func (c *conn) closeAfterWrites() {
	c.closing.Store(true)
	c.qmu.Lock()
	c.qclose = true
	c.qmu.Unlock()
	c.signal()
}

// end closes the connection at once.
func (c *conn) end() {
	c.endOnce.Do(func() {
		close(c.ended)
		c.nc.Close()
	})
}

// writer writes what is queued, gathered into one write.
func (c *conn) writer() {
	var buf []byte
	var lines [][]byte
	for {
		select {
		case <-c.ended:
			return
		case <-c.wake:
		}
		c.qmu.Lock()
		lines, c.outq = c.outq, lines[:0]
		closing := c.qclose
		c.qmu.Unlock()
		buf = buf[:0]
		for _, b := range lines {
			buf = protocol.AppendLine(buf, b)
		}
		clear(lines)
		if len(buf) > 0 {
			_ = c.nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
			if _, err := c.nc.Write(buf); err != nil {
				c.end()
				return
			}
		}
		if cap(buf) > 4<<10 {
			buf = nil // a burst's buffers are not kept
		}
		if cap(lines) > 64 {
			lines = nil
		}
		if closing {
			if tc, ok := c.nc.(*net.TCPConn); ok {
				_ = tc.CloseWrite()
			}
			// the reader is done within a second (serveConn)
			_ = c.nc.SetReadDeadline(time.Now().Add(time.Second))
			return
		}
	}
}

// cleanup forgets the connection and, unless the session expired or was
// superseded, deletes its key (a clean disconnect every gateway hears of).
func (c *conn) cleanup() {
	g := c.g
	g.mu.Lock()
	_, active := g.conns[c]
	delete(g.conns, c)
	for u := range c.subs {
		c.unsubLocked(u)
	}
	g.mu.Unlock()
	if !active {
		return
	}
	if p := c.pending; p != nil {
		<-p.done
		if p.err == nil && !p.ok {
			c.noDelete.Store(true)
		}
	}
	if c.noDelete.Load() {
		return
	}
	// through the pipelines like every other write (they run until every
	// connection is cleaned up, Serve)
	r := &writeReq{c: c, del: true, done: make(chan struct{})}
	g.writes <- r
	<-r.done
	if r.err != nil {
		g.log.Warn("clean close", zap.Error(r.err))
	}
}

func okLine(id json.RawMessage) []byte {
	b, _ := json.Marshal(protocol.OK{Op: protocol.OpOK, ID: id})
	return b
}

func errorLine(code protocol.ErrorCode, msg string, id json.RawMessage) []byte {
	b, _ := json.Marshal(protocol.ErrorFrame{Op: protocol.OpError, Code: code, Message: msg, ID: id})
	return b
}
