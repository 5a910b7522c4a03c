package node

import (
	"bufio"
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
)

// Connection states (conn.state).
const (
	stateConnecting int32 = iota // accepted, waiting for hello
	stateActive                  // welcome sent; the session may be live
	stateClosing                 // a final frame is queued or the socket is gone
)

// readBufferSize is the per-connection read buffer. Requests are small, so
// it is small too, to keep idle sessions cheap; longer lines (up to
// MaxLineBytes) are assembled in a separate buffer that is released after.
const readBufferSize = 2048

// lingerTimeout bounds how long a closing connection waits for the client
// to close its side after the final frame, so the frame is not lost to a
// reset.
const lingerTimeout = 2 * time.Second

var errLineTooLong = errors.New("line too long")

// conn is one client connection: one reader goroutine (readLoop, which
// handles requests in order) and one writer goroutine (writeLoop, which
// drains the bounded outbound queue).
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

	// Guarded by n.wheel.mu: the generation of c's latest placement in the
	// deadline wheel.
	wheelGen uint64

	// Owned by the reader goroutine.
	br       *bufio.Reader
	long     []byte
	requests tokenBucket // the connection's allowance of requests (Config.RequestRate)

	// reqOp is the op index (metrics.go) of the request being handled, for
	// counting error replies; written by the reader.
	reqOp atomic.Int32

	// Guarded by n.mu.
	sess      *localSession // set at welcome; never cleared
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
	wake    chan struct{}

	// closeCode is the error code the connection is closing with, if
	// any: the reason its session ended, for the disconnect counters.
	closeCode ErrorCode

	// A sub's snapshot (sendSnapshot, backpressure.go) waits in frames
	// without counting against the bound: snapFrames frames, snapBytes
	// bytes. snapTaken, when set, is closed once they leave the queue.
	snapFrames int
	snapBytes  int
	snapTaken  chan struct{}
}

func (n *Node) newConn(raw net.Conn) *conn {
	nc, tc := n.wrapTLS(raw)
	return n.newConnOver(raw, nc, tc)
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
		br:     bufio.NewReaderSize(nc, readBufferSize),
	}
	c.q.wake = make(chan struct{}, 1)
	return c
}

// serve runs the connection's two goroutines. The caller has registered c
// in n.conns and added 2 to n.connWG.
func (c *conn) serve() {
	go c.writeLoop()
	go c.readLoop()
}

func (c *conn) readLoop() {
	defer c.n.connWG.Done()
	defer c.finish()
	handshakeDeadline := time.Now().Add(c.n.cfg.HandshakeTimeout)
	c.nc.SetReadDeadline(handshakeDeadline) //nolint:errcheck // a failed deadline shows up as a read error
	if c.tls != nil && !c.handshakeTLS(handshakeDeadline) {
		return
	}
	for {
		line, err := c.readLine()
		if err != nil {
			st := c.state.Load()
			switch {
			case errors.Is(err, errLineTooLong) && st != stateClosing:
				c.closeWithError(nil, CodeLineTooLong, "line longer than "+strconv.Itoa(c.n.cfg.MaxLineBytes)+" bytes")
				c.drainInput()
			case errors.Is(err, os.ErrDeadlineExceeded) && st == stateConnecting:
				c.closeWithError(nil, CodeHandshakeTimeout, "no hello within "+c.n.cfg.HandshakeTimeout.String())
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
			c.awaitRoom()
		}
	}
}

// drainInput discards input after a closing error until the client closes
// or the linger timeout passes, so the error line is not lost to a reset.
func (c *conn) drainInput() {
	c.nc.SetReadDeadline(time.Now().Add(lingerTimeout)) //nolint:errcheck // best effort
	for {
		if _, err := c.readLine(); err != nil && !errors.Is(err, errLineTooLong) {
			return
		}
	}
}

// readLine returns the next line, without its newline. The slice is valid
// until the next call.
func (c *conn) readLine() ([]byte, error) {
	max := c.n.cfg.MaxLineBytes
	c.long = c.long[:0]
	for {
		frag, err := c.br.ReadSlice('\n')
		switch {
		case err == nil:
			line := frag
			if len(c.long) > 0 {
				c.long = append(c.long, frag...)
				line = c.long
			}
			line = line[:len(line)-1]
			if n := len(line); n > 0 && line[n-1] == '\r' {
				line = line[:n-1]
			}
			if len(line) > max {
				c.releaseLong()
				return nil, errLineTooLong
			}
			return line, nil
		case errors.Is(err, bufio.ErrBufferFull):
			if len(c.long)+len(frag) > max+2 {
				// No need to read the rest: the error closes the connection.
				c.releaseLong()
				return nil, errLineTooLong
			}
			c.long = append(c.long, frag...)
		default:
			c.releaseLong()
			return nil, err
		}
	}
}

// releaseLong drops a large assembly buffer so an idle connection stays
// small.
func (c *conn) releaseLong() {
	if cap(c.long) > 4*readBufferSize {
		c.long = nil
	}
	c.long = c.long[:0]
}

// handleLine handles one request line and reports whether it may have
// queued a reply (a plain heartbeat or an empty line queues none).
func (c *conn) handleLine(raw []byte) (replied bool) {
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
		c.sendError(nil, CodeNotAuthenticated, "send hello first")
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

// abort closes the socket at once; the goroutines finish on their own.
func (c *conn) abort() {
	c.q.mu.Lock()
	c.q.dead = true
	c.q.closing = true
	c.q.releaseSnapLocked()
	c.q.mu.Unlock()
	c.state.Store(stateClosing)
	c.wakeWriter()
	// The raw socket: a TLS close would first try to send close_notify
	// to a client that may not be reading.
	c.raw.Close()
}

func (c *conn) wakeWriter() {
	select {
	case c.q.wake <- struct{}{}:
	default:
	}
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
	if len(q.frames)-q.snapFrames >= c.n.cfg.OutboundQueue || q.bytes-q.snapBytes+len(frame) > c.n.cfg.OutboundQueueBytes {
		clear(q.frames)
		q.frames = append(q.frames[:0], encodeError(nil, CodeSlowConsumer, "outbound queue full: the client does not read fast enough"))
		q.bytes = 0
		q.releaseSnapLocked()
		q.closing = true
		q.closeCode = CodeSlowConsumer
		q.mu.Unlock()
		c.state.Store(stateClosing)
		c.n.stats.slowConsumers.Add(1)
		c.n.log.Info("slow consumer dropped", zap.Uint64("conn", c.id), zap.String("remote", c.remote))
		// Unblock a writer stuck on the full socket soon.
		c.nc.SetWriteDeadline(time.Now().Add(time.Second)) //nolint:errcheck // best effort
		c.wakeWriter()
		return false
	}
	q.frames = append(q.frames, frame)
	q.bytes += len(frame)
	q.mu.Unlock()
	c.wakeWriter()
	return true
}

// closeWithError queues a final error line (it bypasses the queue limits)
// and closes the connection once it is written.
func (c *conn) closeWithError(id json.RawMessage, code ErrorCode, msg string) {
	c.closeWithCode(encodeError(id, code, msg), code)
}

// closeWith queues a final frame and closes the connection after it.
func (c *conn) closeWith(frame []byte) { c.closeWithCode(frame, "") }

// closeWithCode is closeWith for a connection closing with error code
// (empty for none).
func (c *conn) closeWithCode(frame []byte, code ErrorCode) {
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
func (q *outQueue) setCloseCode(code ErrorCode) {
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
	q.releaseSnapLocked()
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

func (c *conn) writeLoop() {
	defer c.n.connWG.Done()
	ended := false
	for range c.q.wake {
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
				if errors.Is(err, os.ErrDeadlineExceeded) {
					c.q.setCloseCode(CodeSlowConsumer)
					c.n.stats.slowConsumers.Add(1)
					c.n.log.Info("write timed out; dropping client", zap.Uint64("conn", c.id), zap.String("remote", c.remote))
				}
				c.abort()
				return
			}
		}
		if closing {
			// Everything queued is written (frames queued after take would
			// have been refused). Half-close so the final line arrives, and
			// let the reader drain until the client closes.
			c.q.mu.Lock()
			pending := len(c.q.frames) > 0
			c.q.mu.Unlock()
			if pending {
				c.wakeWriter()
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
}

// sendValue encodes v as a line and queues it.
func (c *conn) sendValue(v any) bool {
	b, err := json.Marshal(v)
	if err != nil {
		c.n.log.Error("encode reply", zap.Error(err))
		return false
	}
	return c.send(append(b, '\n'))
}

// sendError queues an error line in reply to the request being handled,
// closing the connection after it for the codes that close, and counts it
// by the request's op and the code.
func (c *conn) sendError(id json.RawMessage, code ErrorCode, msg string) {
	c.n.stats.m.requestFailed(c.reqOp.Load(), code)
	if code.Closes() {
		c.closeWithError(id, code, msg)
		return
	}
	c.send(encodeError(id, code, msg))
}

func encodeError(id json.RawMessage, code ErrorCode, msg string) []byte {
	b, err := json.Marshal(ErrorFrame{Op: OpError, Code: code, Message: msg, ID: id})
	if err != nil {
		// Only an invalid id can fail, and ids are checked on decode.
		b, _ = json.Marshal(ErrorFrame{Op: OpError, Code: code, Message: msg})
	}
	return append(b, '\n')
}
