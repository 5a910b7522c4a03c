package node

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/rollcall/rollcall/auth"
	"github.com/rollcall/rollcall/protocol"
)

// Connection states (conn.state).
const (
	stateConnecting int32 = iota // accepted, waiting for hello
	stateActive                  // welcome sent; the session may be live
	stateClosing                 // a final frame is queued or the socket is gone
)

// readBufferSize is the read buffer of a connection served by goroutines
// (TLS, WebSocket, Config.GoroutineIO). Requests are small, so it is small
// too, to keep idle sessions cheap; longer lines (up to MaxLineBytes) are
// assembled in a separate buffer that is released after. A connection on
// the event loop has no read buffer of its own (netpoll_linux.go).
const readBufferSize = 2048

// keepInput is the largest capacity of a held partial line an event-loop
// connection keeps once the line is complete.
const keepInput = 256

// lingerTimeout bounds how long a closing connection waits for the client
// to close its side after the final frame, so the frame is not lost to a
// reset.
const lingerTimeout = 2 * time.Second

// conn is one client connection. Its requests are read and handled in
// order by one of two drivers: a reader goroutine (readLoop) for TLS,
// WebSocket and Config.GoroutineIO connections, or the event loop's poller
// (poller.ready, then consume) for plain TCP on Linux. Either hands each
// line to handleLine. Its bounded outbound queue is written by whoever
// queues a frame, without blocking, on the event loop, and otherwise (or
// when the socket does not take it all) by a writer goroutine (writeLoop)
// that runs only while frames are pending.
type conn struct {
	// Static after newConn.
	n      *Node
	nc     net.Conn  // raw, or tls over it
	raw    net.Conn  // the TCP socket: closing it never blocks
	tls    *tls.Conn // nc when the node serves TLS, else nil
	id     uint64
	remote string
	ip     netip.Addr // the source address counted in n.perIP; zero when not counted
	// upgradeToken is the token of a WebSocket upgrade request (ws.go),
	// used by a hello that carries none.
	upgradeToken string

	// Hot path, lock-free.
	state      atomic.Int32
	lastActive atomic.Int64 // Node.mono() of the last valid request
	// routing counts the routed sends c's reader waits on (send.go): its
	// session does not expire meanwhile, as the gateway, not the client,
	// holds up its requests.
	routing atomic.Int32
	// heartbeats counts this connection's heartbeats. It is the
	// connection's own, so heartbeats on many cores do not contend for one
	// counter; it is added to the node's when the connection is forgotten
	// (endConnSession), and Node.Metrics sums the open connections'.
	heartbeats atomic.Uint64

	// Set by hello and refresh (on the reader goroutine), read anywhere:
	// the session token's grants (auth.Unrestricted on a --dev gateway)
	// and its deadline, Node.mono() nanoseconds of the token's exp plus
	// leeway (0: none, as on a --dev gateway).
	grants        atomic.Pointer[auth.Grants]
	tokenDeadline atomic.Int64
	// graceDeadline is the Node.mono() time at which the session of a
	// connection the client dropped is written disconnected (grace.go);
	// 0 while the connection is open or its session ended.
	graceDeadline atomic.Int64

	// Guarded by n.wheel.mu: the generation of c's latest placement in the
	// deadline wheel.
	wheelGen uint64

	// Owned by the reader (the reader goroutine, or whoever holds rmu).
	lr       *protocol.Reader // readLoop's, made when it starts
	requests tokenBucket      // the connection's allowance of requests (Config.RequestRate)

	// The event loop (netpoll_linux.go); poll is nil for a connection
	// served by goroutines. Static after newConn, but fd, which closing
	// sets to -1 under wmu.
	poll *poller
	fd   int    // the socket, a duplicate owned by the event loop (nc is closed)
	slot uint32 // in poll's table
	// The io_uring mode's receive (uring_linux.go), the poller's only,
	// under rmu: its number, whether it is in the ring, and whether it
	// is being cancelled.
	rseq    uint16
	rlive   bool
	rcancel bool
	// wmu guards fd (its writes, shutdown, epoll interest and close) and
	// the writer's state below; it is taken last, after rmu and q.mu are
	// released or held.
	wmu     sync.Mutex
	pend    [][]byte    // frames taken but not yet written, the first maybe cut
	batch   [][]byte    // the batch pend is part of, to recycle
	wtimer  *time.Timer // the write timeout, while pend waits for room
	wgen    uint64      // counts arms of wtimer: a stale firing does nothing
	wantOut bool        // pend waits for room: the poller flushes it
	readOff bool        // reading is paused
	closed  bool        // closing: the session is ended, the final frames go out
	// rmu serializes the handling of c's input on the event loop: the
	// poller, the goroutine resuming c after a pause, and the handshake
	// timer hold it. It guards the fields below. Lock order: rmu before
	// n.mu and q.mu.
	rmu      sync.Mutex
	in       []byte      // input not yet handled: a partial line, or lines held while paused
	paused   bool        // reading is off until the queue has room (roomWait)
	finished bool        // the socket is closed and c forgotten
	hsTimer  *time.Timer // the handshake timeout, until welcome
	// await, set by a handler, is closed once the request it handles on a
	// goroutine has queued its reply (handleSend): the reader handles the
	// next request only then.
	await <-chan struct{}

	// reqOp is the op index (metrics.go) of the request being handled, for
	// counting error replies; written by the reader.
	reqOp atomic.Int32

	// snap is the snapshot of the sub being handled, still to send
	// (subscribe.go); owned by the reader, like the fields above.
	snap *subSnapshot

	// Guarded by n.mu.
	sess      *localSession // set at welcome; never cleared
	tracks    *trackSet     // the sessions c tracks (track.go); nil until its first track
	subUsers  map[string]struct{}
	subGroups map[string]struct{}

	q outQueue
}

// outQueue is a connection's bounded queue of encoded frames. Producers never
// block: a frame that does not fit marks the client a slow consumer.
type outQueue struct {
	mu      sync.Mutex
	frames  [][]byte
	spare   [][]byte
	bytes   int
	closing bool // accept no more frames; the writer flushes and closes
	dead    bool // the socket is gone; the writer exits without writing
	// writing is set while someone writes the queue (a producer on the
	// event loop, or writeLoop); it stays set once closing is.
	writing bool
	// On the event loop, corked is set while the reader handles the lines
	// of one read (consumeCorked): a frame queued meanwhile is written
	// when they are all handled (flushDue), so the replies to requests
	// read together leave in one write.
	corked   bool
	flushDue bool

	// closeCode is the error code the connection is closing with, if
	// any: the reason its session ended, for the disconnect counters.
	closeCode protocol.ErrorCode

	// roomFreed, when set, is closed once the queued frames leave the
	// queue (roomWait, backpressure.go).
	roomFreed chan struct{}
}

func (n *Node) newConn(raw net.Conn) *conn {
	nc, tc := n.wrapTLS(raw)
	c := n.newConnOver(raw, nc, tc)
	if tc == nil {
		if p, fd, ok := n.polls.pollFor(raw); ok {
			// The event loop owns a duplicate of the socket; the
			// net.Conn is closed, so the runtime's poller forgets it.
			c.poll, c.fd = p, fd
			raw.Close()
		}
	}
	return c
}

// newConnOver returns a connection served on nc, whose raw socket (closed
// at once by abort) is raw; tc is nc when it is a TLS server connection.
func (n *Node) newConnOver(raw, nc net.Conn, tc *tls.Conn) *conn {
	c := &conn{
		n:      n,
		nc:     nc,
		raw:    raw,
		tls:    tc,
		id:     n.nextConn.Add(1),
		remote: raw.RemoteAddr().String(),
	}
	return c
}

// serve starts reading c: on its poller, or with a reader goroutine. The
// caller has registered c in n.conns and added 1 to n.connWG, which c's
// reader side releases once c is finished (a writer or a paused reader's
// goroutine adds its own).
func (c *conn) serve() {
	if c.poll != nil {
		c.rmu.Lock()
		c.hsTimer = time.AfterFunc(c.n.cfg.HandshakeTimeout, c.handshakeExpired)
		c.rmu.Unlock()
		if err := c.poll.add(c); err != nil {
			c.n.log.Warn("serving a client connection failed", zap.Uint64("conn", c.id), zap.Error(err))
			c.rmu.Lock()
			c.finishEvent()
			c.rmu.Unlock()
		}
		return
	}
	go c.readLoop()
}

func (c *conn) readLoop() {
	defer c.n.connWG.Done()
	defer c.finish()
	defer c.recoverAbort("reader")
	c.lr = protocol.NewReader(c.nc, readBufferSize, c.n.cfg.MaxLineBytes)
	handshakeDeadline := time.Now().Add(c.n.cfg.HandshakeTimeout)
	c.nc.SetReadDeadline(handshakeDeadline) //nolint:errcheck // a failed deadline shows up as a read error
	if c.tls != nil && !c.handshakeTLS(handshakeDeadline) {
		return
	}
	for {
		line, err := c.lr.ReadLine()
		if err != nil {
			st := c.state.Load()
			switch {
			case errors.Is(err, protocol.ErrLineTooLong) && st != stateClosing:
				c.closeWithError(nil, protocol.CodeLineTooLong, "line longer than "+strconv.Itoa(c.n.cfg.MaxLineBytes)+" bytes")
				c.drainInput()
			case errors.Is(err, os.ErrDeadlineExceeded) && st == stateConnecting:
				c.closeWithError(nil, protocol.CodeHandshakeTimeout, "no hello within "+c.n.cfg.HandshakeTimeout.String())
				c.drainInput()
			case errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed), st == stateClosing:
			default:
				c.n.log.Debug("read failed", zap.Uint64("conn", c.id), zap.Error(err))
			}
			return
		}
		if c.state.Load() == stateClosing {
			continue // discard input until the client or the writer closes
		}
		if c.handleLine(line) {
			for room := c.sendSnapshotPages(); room != nil; room = c.sendSnapshotPages() {
				<-room
			}
		}
	}
}

// consume handles the input data read on the event loop (the poller's
// buffer, valid only during the call; nil when a pause ends) line by line,
// as readLoop does, after the input c holds: a partial line, completed from
// data, or the lines held while c was paused. What is left (a partial line,
// or the rest of the input when c pauses for backpressure) is copied into
// c. The caller holds c.rmu.
func (c *conn) consume(data []byte) {
	if len(c.in) > 0 {
		if i := bytes.IndexByte(data, '\n'); i < 0 {
			c.in = append(c.in, data...)
			data = nil
		} else {
			c.in = append(c.in, data[:i+1]...)
			data = data[i+1:]
		}
		rest := c.lines(c.in)
		// rest is the tail of c.in: append moves it down.
		c.in = append(c.in[:0], rest...)
		if c.finished || c.paused || len(c.in) > 0 {
			c.hold(data)
			return
		}
		if cap(c.in) > keepInput {
			c.in = nil
		}
	}
	c.hold(c.lines(data))
}

// hold keeps input for later, unless c is finished.
func (c *conn) hold(rest []byte) {
	if c.finished {
		c.in = nil
		return
	}
	if len(rest) > 0 {
		c.in = append(c.in, rest...)
	}
}

// lines handles the complete lines of buf and returns the rest: a partial
// line, or all that follows a line after which c paused; nil when the input
// is discarded (closing).
func (c *conn) lines(buf []byte) []byte {
	max := c.n.cfg.MaxLineBytes
	for !c.paused && !c.finished && len(buf) > 0 {
		if c.state.Load() == stateClosing {
			return nil // discard input until the client or the writer closes
		}
		line, rest, found, err := protocol.Cut(buf, max)
		if err != nil {
			c.lineTooLong()
			return nil
		}
		if !found {
			return buf
		}
		buf = rest
		if c.handleLine(line) {
			if c.await != nil {
				// The request is still being handled on a goroutine.
				c.pause(c.await)
				c.await = nil
			} else if room := c.sendSnapshotPages(); room != nil {
				// Write what waits first: the queue may hold
				// half its bound only because it is corked.
				if c.flushCorked() {
					room = c.sendSnapshotPages()
				}
				if room != nil {
					c.pause(room)
				}
			}
		}
	}
	return buf
}

// lineTooLong closes an event-loop connection with line_too_long; the input
// that follows is discarded until the client closes or the linger passes.
func (c *conn) lineTooLong() {
	if c.state.Load() != stateClosing {
		c.closeWithError(nil, protocol.CodeLineTooLong, "line longer than "+strconv.Itoa(c.n.cfg.MaxLineBytes)+" bytes")
	}
}

// handshakeExpired is an event-loop connection's handshake timeout.
func (c *conn) handshakeExpired() {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if c.finished || c.hsTimer == nil {
		return
	}
	c.hsTimer = nil
	if c.state.Load() == stateConnecting {
		c.closeWithError(nil, protocol.CodeHandshakeTimeout, "no hello within "+c.n.cfg.HandshakeTimeout.String())
	}
}

// handshakeDone stops the handshake timeout once the session is welcomed;
// the sweeper takes over. It runs on c's reader.
func (c *conn) handshakeDone() {
	if c.poll == nil {
		c.nc.SetReadDeadline(time.Time{}) //nolint:errcheck // best effort
		return
	}
	if c.hsTimer != nil {
		c.hsTimer.Stop()
		c.hsTimer = nil
	}
}

// drainInput discards input after a closing error until the client closes
// or the linger timeout passes, so the error line is not lost to a reset.
func (c *conn) drainInput() {
	c.nc.SetReadDeadline(time.Now().Add(lingerTimeout)) //nolint:errcheck // best effort
	for {
		if _, err := c.lr.ReadLine(); err != nil && !errors.Is(err, protocol.ErrLineTooLong) {
			return
		}
	}
}

// handleLine handles one request line and reports whether it may have
// queued a reply (a plain heartbeat or an empty line queues none).
func (c *conn) handleLine(raw []byte) (replied bool) {
	defer c.recoverRequest(&replied)
	line := trimLine(raw)
	if len(line) == 0 {
		return false
	}
	now := c.n.mono()
	if !c.allowRequest(line, now) {
		return true
	}
	if isPlainHeartbeat(line) {
		// The hot path: one clock read, two atomic loads (the stalls
		// subtracted by mono, the limits), the request bucket's arithmetic,
		// one atomic store and one atomic add (the connection's heartbeat
		// counter).
		c.heartbeats.Add(1)
		if c.state.Load() == stateActive {
			c.lastActive.Store(now)
			return false
		}
		c.reqOp.Store(opHB)
		c.sendError(nil, protocol.CodeNotAuthenticated, "send hello first")
		return true
	}
	req, rerr := decodeRequest(line)
	op := opIndex(req.Op)
	c.reqOp.Store(op)
	if op == opHB {
		c.heartbeats.Add(1)
	} else {
		c.n.stats.m.requests[op].Add(1)
	}
	if rerr != nil {
		c.n.stats.badRequests.Add(1)
		c.sendError(req.ID, rerr.code, rerr.msg)
		return true
	}
	c.n.dispatch(c, &req)
	return true
}

// finish runs when the reader stops: the session, if still live, is
// disconnected at once, and the connection is forgotten.
func (c *conn) finish() {
	c.n.connLost(c)
	c.abort()
}

// abort closes the connection at once; its reader and writer finish on
// their own. It never blocks and takes no lock but q.mu, so it may be
// called anywhere.
func (c *conn) abort() {
	c.markDead()
	if c.poll != nil {
		// The poller closes the socket, when it sees the hangup.
		c.shutdownEvent()
		return
	}
	// The raw socket: a TLS close would first try to send close_notify
	// to a client that may not be reading.
	c.raw.Close()
}

// markDead marks the queue dead: nothing more is written.
func (c *conn) markDead() {
	c.q.mu.Lock()
	c.q.dead = true
	c.q.closing = true
	c.q.freeRoomLocked()
	c.q.mu.Unlock()
	c.state.Store(stateClosing)
}

// wakeWriter has the queue written unless someone is writing it: on the
// event loop by the caller itself, without blocking, and by the poller
// when the socket has room again (flushEvent), or, closing, by a goroutine
// that ends the session first (closeEvent); otherwise by a writer
// goroutine (writeLoop) that runs while frames are pending.
func (c *conn) wakeWriter() {
	q := &c.q
	q.mu.Lock()
	if q.writing || q.dead || (len(q.frames) == 0 && !q.closing) {
		q.mu.Unlock()
		return
	}
	q.writing = true
	if c.poll != nil && !q.closing {
		if q.corked {
			q.flushDue = true
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
		c.flushEvent(false)
		return
	}
	c.n.connWG.Add(1) // not dead: c's reader side holds connWG
	q.mu.Unlock()
	if c.poll != nil {
		go c.closeEvent(nil)
		return
	}
	go c.writeLoop()
}

// doneWriting clears q.writing and reports true unless frames are pending
// or the queue is closing (the caller writes on).
func (q *outQueue) doneWriting() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.frames) > 0 || q.closing {
		return false
	}
	q.writing = false
	return true
}

// send queues a frame without blocking and reports whether it was queued.
// A frame that overflows the queue replaces it with slow_consumer and closes
// the connection.
func (c *conn) send(frame []byte) bool {
	q := &c.q
	q.mu.Lock()
	if q.closing {
		q.mu.Unlock()
		return false
	}
	if len(q.frames) >= c.n.cfg.OutboundQueue || q.bytes+len(frame) > c.n.cfg.OutboundQueueBytes {
		c.overflowLocked()
		return false
	}
	q.frames = append(q.frames, frame)
	q.bytes += len(frame)
	q.mu.Unlock()
	c.wakeWriter()
	return true
}

// sendAll is send for several frames, queued together or not at all (then
// the connection is a slow consumer).
func (c *conn) sendAll(frames [][]byte) bool {
	q := &c.q
	size := 0
	for _, f := range frames {
		size += len(f)
	}
	q.mu.Lock()
	if q.closing {
		q.mu.Unlock()
		return false
	}
	if len(q.frames)+len(frames) > c.n.cfg.OutboundQueue || q.bytes+size > c.n.cfg.OutboundQueueBytes {
		c.overflowLocked()
		return false
	}
	q.frames = append(q.frames, frames...)
	q.bytes += size
	q.mu.Unlock()
	c.wakeWriter()
	return true
}

// overflowLocked replaces the queue with slow_consumer and closes the
// connection. The caller holds q.mu, which overflowLocked releases.
func (c *conn) overflowLocked() {
	q := &c.q
	clear(q.frames)
	q.frames = append(q.frames[:0], encodeError(nil, protocol.CodeSlowConsumer, "outbound queue full: the client does not read fast enough"))
	q.bytes = 0
	q.freeRoomLocked()
	q.closing = true
	q.closeCode = protocol.CodeSlowConsumer
	q.mu.Unlock()
	c.state.Store(stateClosing)
	c.n.stats.slowConsumers.Add(1)
	c.n.log.Info("slow consumer dropped", zap.Uint64("conn", c.id), zap.String("remote", c.remote))
	// Unblock a writer stuck on the full socket soon.
	if c.poll != nil {
		c.writeSoonEvent()
	} else {
		c.nc.SetWriteDeadline(time.Now().Add(time.Second)) //nolint:errcheck // best effort
	}
	c.wakeWriter()
}

// closeWithError queues a final error line (it bypasses the queue limits)
// and closes the connection once it is written.
func (c *conn) closeWithError(id json.RawMessage, code protocol.ErrorCode, msg string) {
	c.closeWithCode(encodeError(id, code, msg), code)
}

// closeWith queues a final frame and closes the connection after it.
func (c *conn) closeWith(frame []byte) { c.closeWithCode(frame, "") }

// closeWithCode is closeWith for a connection closing with error code
// (empty for none).
func (c *conn) closeWithCode(frame []byte, code protocol.ErrorCode) {
	q := &c.q
	q.mu.Lock()
	if q.closing {
		q.mu.Unlock()
		return
	}
	q.frames = append(q.frames, frame)
	q.bytes += len(frame)
	q.closing = true
	q.closeCode = code
	q.mu.Unlock()
	c.state.Store(stateClosing)
	c.wakeWriter()
}

// setCloseCode records why a connection closes unless a reason is set.
func (q *outQueue) setCloseCode(code protocol.ErrorCode) {
	q.mu.Lock()
	if q.closeCode == "" {
		q.closeCode = code
	}
	q.mu.Unlock()
}

// disconnectReason returns the disconnect counter index (metrics.go) for
// a session ended because its connection closed.
func (q *outQueue) disconnectReason() int {
	q.mu.Lock()
	code := q.closeCode
	q.mu.Unlock()
	if code == "" {
		return reasonClosed
	}
	return codeIndex(code)
}

// take moves the queued frames out for writing.
func (q *outQueue) take() (frames [][]byte, closing, dead bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	frames = q.frames
	q.frames = q.spare[:0]
	q.spare = nil
	q.bytes = 0
	q.freeRoomLocked()
	return frames, q.closing, q.dead
}

// recycle hands a written batch back for reuse, unless it grew large.
func (q *outQueue) recycle(frames [][]byte) {
	clear(frames)
	if cap(frames) > 64 {
		return
	}
	q.mu.Lock()
	if q.spare == nil {
		q.spare = frames[:0]
	}
	q.mu.Unlock()
}

// writeLoop writes the queue until it is empty (then clears q.writing and
// exits), the connection closes, or a write fails: the writer of a
// connection served by goroutines. The caller set q.writing and added 1 to
// connWG.
func (c *conn) writeLoop() {
	defer c.n.connWG.Done()
	defer c.recoverAbort("writer")
	ended := false
	for {
		frames, closing, dead := c.q.take()
		if dead {
			return
		}
		if closing && !ended {
			// The connection is closing (slow consumer, line too long, bye,
			// ...): end its session now, not when the socket is gone.
			c.n.endConnSession(c, false)
			ended = true
		}
		if len(frames) > 0 {
			timeout := c.n.cfg.WriteTimeout
			if closing {
				timeout = min(timeout, lingerTimeout) // a final frame is best effort
			}
			err := c.writeFrames(frames, timeout)
			c.q.recycle(frames)
			if err != nil {
				c.writeFailed(err)
				return
			}
		}
		if !closing {
			if c.q.doneWriting() {
				return
			}
			continue
		}
		// Everything queued is written (frames queued after take would
		// have been refused). Half-close so the final line arrives, and
		// let the reader drain until the client closes.
		c.q.mu.Lock()
		pending := len(c.q.frames) > 0
		c.q.mu.Unlock()
		if pending {
			continue
		}
		// A TCP half-close, or TLS's close_notify (which needs the
		// handshake done).
		if cw, ok := c.nc.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
			c.nc.SetReadDeadline(time.Now().Add(lingerTimeout)) //nolint:errcheck // best effort
		} else {
			c.nc.Close()
		}
		return
	}
}

// writeFailed drops the connection after a failed write.
func (c *conn) writeFailed(err error) {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		c.q.setCloseCode(protocol.CodeSlowConsumer)
		c.n.stats.slowConsumers.Add(1)
		c.n.log.Info("write timed out; dropping client", zap.Uint64("conn", c.id), zap.String("remote", c.remote))
	}
	c.abort()
}

// sendValue encodes v as a line and queues it.
func (c *conn) sendValue(v any) bool {
	b, err := protocol.Marshal(v)
	if err != nil {
		c.n.log.Error("encode reply", zap.Error(err))
		return false
	}
	return c.send(b)
}

// sendError queues an error line in reply to the request being handled,
// closing the connection after it for the codes that close, and counts it
// by the request's op and the code.
func (c *conn) sendError(id json.RawMessage, code protocol.ErrorCode, msg string) {
	c.n.stats.m.requestFailed(c.reqOp.Load(), code)
	if code.Closes() {
		c.closeWithError(id, code, msg)
		return
	}
	c.send(encodeError(id, code, msg))
}

func encodeError(id json.RawMessage, code protocol.ErrorCode, msg string) []byte {
	b, err := protocol.Marshal(protocol.ErrorFrame{Op: protocol.OpError, Code: code, Message: msg, ID: id})
	if err != nil {
		// Only an invalid id can fail, and ids are checked on decode.
		b, _ = protocol.Marshal(protocol.ErrorFrame{Op: protocol.OpError, Code: code, Message: msg})
	}
	return b
}
