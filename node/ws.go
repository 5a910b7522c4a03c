package node

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/zap"
)

// The WebSocket transport (GET /ws on the HTTP listener; docs/protocol.md,
// "WebSocket"). A WebSocket is adapted into the net.Conn the connection
// code (conn.go) serves, so both transports share one implementation of the
// protocol, its limits and its session semantics:
//
//   - reads: the bytes of each text message, followed by a newline when the
//     message does not end in one, so a message is a line. Line limits
//     apply to the stream exactly as on TCP (a message over MaxLineBytes is
//     a line_too_long). A binary message closes the WebSocket with status
//     1003 (unsupported data).
//   - writes: each newline-terminated line goes out as its own text
//     message, without the newline.
//   - deadlines are those of a net.Conn: a read deadline that passes fails
//     the read and leaves the connection usable (the handshake timeout
//     still writes its error line).
//   - Close starts the WebSocket close handshake (status 1000) in the
//     background; the raw close (conn.raw, used by abort) closes the TCP
//     socket at once.
//
// The HTTP handler's goroutine reads the WebSocket (wsConn.pump) for the
// life of the connection, so a WebSocket client costs the same two
// connection goroutines as a TCP one plus that reader.

// wsChunk is the size of the pieces a WebSocket message is read in.
const wsChunk = readBufferSize

// wsAcceptOptions returns the upgrade options for Config.WSAllowedOrigins:
// same-origin only when empty, any origin for "*" (or on a Dev node given
// no list).
func (n *Node) wsAcceptOptions() *websocket.AcceptOptions {
	opts := &websocket.AcceptOptions{}
	origins := n.cfg.WSAllowedOrigins
	for _, o := range origins {
		if o == "*" {
			opts.InsecureSkipVerify = true
		}
	}
	if len(origins) == 0 && n.cfg.Dev {
		opts.InsecureSkipVerify = true
	}
	if !opts.InsecureSkipVerify {
		opts.OriginPatterns = origins
	}
	return opts
}

// startWS starts the dedicated WebSocket listener (Config.WSAddr), which
// serves GET /ws and nothing else; TLS as on the other ports.
func (n *Node) startWS() error {
	if n.cfg.WSAddr == "" {
		return nil
	}
	l, err := net.Listen("tcp", n.cfg.WSAddr)
	if err != nil {
		return fmt.Errorf("node: listen for WebSocket clients on %s: %w", n.cfg.WSAddr, err)
	}
	n.wsLn = l
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ws", n.handleWS)
	n.wsSrv = n.newHTTPServer(mux)
	served := n.httpListener(l)
	n.loops.Add(1)
	go func() {
		defer n.loops.Done()
		if err := n.wsSrv.Serve(served); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.log.Error("websocket server stopped", zap.Error(err))
		}
	}()
	return nil
}

// WSAddr returns the bound address of the dedicated WebSocket listener, or
// nil when there is none (Config.WSAddr empty) or before Start.
func (n *Node) WSAddr() net.Addr {
	if n.wsLn == nil {
		return nil
	}
	return n.wsLn.Addr()
}

// handleWS upgrades GET /ws and serves the WebSocket as a client
// connection.
func (n *Node) handleWS(w http.ResponseWriter, r *http.Request) {
	hw := &hijackRecorder{ResponseWriter: w}
	ws, err := websocket.Accept(hw, r, n.wsAccept)
	if err != nil {
		// Accept wrote the HTTP error: 403 for an origin not allowed, 400
		// or 426 for a request that is not a WebSocket upgrade.
		n.log.Debug("websocket upgrade refused", zap.String("remote", r.RemoteAddr), zap.Error(err))
		return
	}
	ws.SetReadLimit(-1) // lines are limited by the connection code, as on TCP
	// From here the connection is a client connection, under the client
	// port's limits and deadlines: it stops counting as an HTTP one, and
	// sheds the deadlines net/http set for the upgrade request.
	releaseHTTPConn(hw.conn)
	hw.conn.SetDeadline(time.Time{}) //nolint:errcheck // best effort; wsConn keeps deadlines of its own
	raw := hw.conn
	if tc, ok := raw.(*tls.Conn); ok {
		// Closing the TLS conn would send close_notify and could block.
		raw = tc.NetConn()
	}
	wc := newWSConn(ws, hw.conn.LocalAddr(), hw.conn.RemoteAddr(), raw.Close)
	n.stats.accepted.Add(1)
	token := upgradeToken(r)
	n.serveClient(wc, true, func() *conn {
		c := n.newConnOver(wsRaw{wc}, wc, nil)
		c.upgradeToken = token
		return c
	})
	wc.pump()
}

// upgradeToken returns the token a WebSocket upgrade request carries, for
// clients (browsers) that cannot put it in hello: "Authorization: Bearer
// <token>" or the query parameter token. hello verifies it exactly as a
// token in hello; a token in hello takes precedence.
func upgradeToken(r *http.Request) string {
	if h := r.Header.Get("Authorization"); h != "" {
		if scheme, tok, ok := strings.Cut(h, " "); ok && strings.EqualFold(scheme, "Bearer") {
			return strings.TrimSpace(tok)
		}
	}
	return r.URL.Query().Get("token")
}

// hijackRecorder records the connection websocket.Accept hijacks, so the
// raw socket can be closed at once.
type hijackRecorder struct {
	http.ResponseWriter
	conn net.Conn
}

func (h *hijackRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	hj, ok := h.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("websocket: response does not support hijacking")
	}
	c, rw, err := hj.Hijack()
	h.conn = c
	return c, rw, err
}

func (h *hijackRecorder) Unwrap() http.ResponseWriter { return h.ResponseWriter }

// wsConn is a WebSocket as a net.Conn of lines (see the top of this file).
// Read is called by one goroutine at a time, as is Write.
type wsConn struct {
	ws            *websocket.Conn
	local, remote net.Addr
	closeRaw      func() error // closes the socket at once; never blocks

	// The reader (pump) hands chunks to Read one at a time: Read sends on
	// free once it has consumed a chunk.
	chunks   chan []byte
	free     chan struct{}
	pumpDone chan struct{} // closed when pump returns; readErr set first
	readErr  error
	pending  []byte // owned by Read

	rdl, wdl deadline

	done      chan struct{} // closed by closeNow
	closeOnce sync.Once
	nowOnce   sync.Once
}

var _ net.Conn = (*wsConn)(nil)

func newWSConn(ws *websocket.Conn, local, remote net.Addr, closeRaw func() error) *wsConn {
	return &wsConn{
		ws: ws, local: local, remote: remote, closeRaw: closeRaw,
		chunks: make(chan []byte), free: make(chan struct{}, 1),
		pumpDone: make(chan struct{}), done: make(chan struct{}),
	}
}

// pump reads the WebSocket until it fails or closes, handing the bytes of
// each text message, newline-terminated, to Read.
func (w *wsConn) pump() {
	defer close(w.pumpDone)
	buf := make([]byte, wsChunk)
	newline := []byte{'\n'}
	for {
		typ, r, err := w.ws.Reader(context.Background())
		if err != nil {
			w.readErr = wsReadError(err)
			return
		}
		if typ != websocket.MessageText {
			// Discard it (bounded), then close: the protocol is JSON text.
			if n, _ := io.Copy(io.Discard, io.LimitReader(r, int64(wsChunk)*8)); n >= int64(wsChunk)*8 {
				w.closeNow()
				w.readErr = net.ErrClosed
				return
			}
			go w.ws.Close(websocket.StatusUnsupportedData, "binary messages are not accepted: send JSON text messages") //nolint:errcheck // best effort
			continue
		}
		last := byte('\n')
		empty := true
		for {
			k, err := r.Read(buf)
			if k > 0 {
				empty = false
				last = buf[k-1]
				if !w.hand(buf[:k]) {
					w.readErr = net.ErrClosed
					return
				}
			}
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				w.readErr = wsReadError(err)
				return
			}
		}
		if (last != '\n' || empty) && !w.hand(newline) {
			w.readErr = net.ErrClosed
			return
		}
	}
}

// hand gives b to Read and waits until Read has consumed it; false when the
// connection was closed first.
func (w *wsConn) hand(b []byte) bool {
	select {
	case w.chunks <- b:
	case <-w.done:
		return false
	}
	select {
	case <-w.free:
		return true
	case <-w.done:
		return false
	}
}

// wsReadError maps a WebSocket read error to the net.Conn's: a close frame
// from the peer (any status) is the end of the stream.
func wsReadError(err error) error {
	if websocket.CloseStatus(err) != -1 || errors.Is(err, io.EOF) {
		return io.EOF
	}
	return err
}

func (w *wsConn) Read(p []byte) (int, error) {
	if len(w.pending) == 0 {
		select {
		case w.pending = <-w.chunks:
		case <-w.pumpDone:
			return 0, w.readErr
		case <-w.done:
			return 0, net.ErrClosed
		case <-w.rdl.wait():
			return 0, os.ErrDeadlineExceeded
		}
	}
	k := copy(p, w.pending)
	w.pending = w.pending[k:]
	if len(w.pending) == 0 {
		w.free <- struct{}{}
	}
	return k, nil
}

// Write sends each newline-terminated line of p as one text message (a
// last piece without a newline too). A write deadline that passes during
// the write, also one set while it runs, fails it and closes the WebSocket
// (the library cannot abandon a frame half-written).
func (w *wsConn) Write(p []byte) (int, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if !w.wdl.watch(cancel) {
		return 0, os.ErrDeadlineExceeded
	}
	defer w.wdl.watch(nil)
	written := 0
	for len(p) > 0 {
		line, adv := p, len(p)
		if i := bytes.IndexByte(p, '\n'); i >= 0 {
			line, adv = p[:i], i+1
		}
		if err := w.ws.Write(ctx, websocket.MessageText, line); err != nil {
			if ctx.Err() != nil {
				return written, os.ErrDeadlineExceeded
			}
			return written, err
		}
		written += adv
		p = p[adv:]
	}
	return written, nil
}

// Close starts the WebSocket close handshake (status 1000) and returns at
// once; the socket closes when the peer answers or after the library's
// timeout.
func (w *wsConn) Close() error {
	w.closeOnce.Do(func() {
		go w.ws.Close(websocket.StatusNormalClosure, "") //nolint:errcheck // best effort
	})
	return nil
}

// closeNow closes the socket at once.
func (w *wsConn) closeNow() error {
	w.nowOnce.Do(func() {
		close(w.done)
		w.closeRaw() //nolint:errcheck // best effort
	})
	return nil
}

func (w *wsConn) LocalAddr() net.Addr  { return w.local }
func (w *wsConn) RemoteAddr() net.Addr { return w.remote }

func (w *wsConn) SetDeadline(t time.Time) error {
	w.rdl.set(t)
	w.wdl.set(t)
	return nil
}
func (w *wsConn) SetReadDeadline(t time.Time) error  { w.rdl.set(t); return nil }
func (w *wsConn) SetWriteDeadline(t time.Time) error { w.wdl.set(t); return nil }

// wsRaw is the raw side of a wsConn (conn.raw): its Close closes at once.
type wsRaw struct{ *wsConn }

func (r wsRaw) Close() error { return r.closeNow() }

// deadline is a net.Conn deadline: a channel closed when it passes.
type deadline struct {
	mu    sync.Mutex
	timer *time.Timer
	ch    chan struct{}
	fired bool
	gen   uint64 // counts set calls: a timer of an earlier set does nothing
	// onFire, when set, is called when the deadline passes (watch).
	onFire func()
}

// watch makes the passing of the deadline, the current one or one set
// later, call f (nil: stop), and reports whether the deadline is still
// ahead.
func (d *deadline) watch(f func()) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.onFire = f
	return !d.fired
}

// fireLocked closes the channel and calls the watcher.
func (d *deadline) fireLocked() {
	close(d.ch)
	d.fired = true
	if d.onFire != nil {
		d.onFire()
	}
}

func (d *deadline) set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.gen++
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
	if d.ch == nil || d.fired {
		d.ch, d.fired = make(chan struct{}), false
	}
	if t.IsZero() {
		return
	}
	dur := time.Until(t)
	if dur <= 0 {
		d.fireLocked()
		return
	}
	ch, gen := d.ch, d.gen
	d.timer = time.AfterFunc(dur, func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.gen == gen && d.ch == ch && !d.fired {
			d.fireLocked()
		}
	})
}

func (d *deadline) wait() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ch == nil {
		d.ch = make(chan struct{})
	}
	return d.ch
}
