package bench

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/rollcall/rollcall/client"
	"github.com/rollcall/rollcall/protocol"
)

// Source addresses: a connection to a loopback gateway is made from one of
// 127.0.0.2..127.0.0.250 (the session's number picks it) with the port the
// OS chooses, so one machine holds more connections than one source
// address's ephemeral ports allow.
const (
	firstSourceIP = 2
	sourceIPs     = 249
)

// sourceAddr returns the local address to dial addr from for session g,
// or nil to let the OS choose (a gateway that is not on loopback).
func sourceAddr(addr string, g int) *net.TCPAddr {
	host := addr
	if client.IsWebSocketAddr(addr) {
		u, err := url.Parse(addr)
		if err != nil {
			return nil
		}
		host = u.Host
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	ip := net.ParseIP(host)
	if host == "localhost" {
		ip = net.IPv4(127, 0, 0, 1)
	}
	if ip == nil || ip.To4() == nil || !ip.IsLoopback() {
		return nil
	}
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(firstSourceIP+g%sourceIPs))}
}

// wireState is one session's view of its connections, kept across
// reconnects.
type wireState struct {
	lastWrite atomic.Int64 // ns since the worker's epoch of the last line written
	muted     atomic.Bool  // silent: lines are swallowed, no new connection is made
}

var errMuted = errors.New("bench: session made silent")

var hbLine = []byte(`{"op":"hb"}`)

// wireConn wraps a session's connection: it counts heartbeats, records
// the time of the last line written, swallows writes once the session is
// made silent (the connection stays open and quiet, as a hung client's
// does), and rewrites the welcome's heartbeat_ms when the run sets its own
// interval.
type wireConn struct {
	client.Conn
	st        *wireState
	w         *worker
	welcomed  bool
	heartbeat time.Duration
}

func (c *wireConn) WriteLine(line []byte) error {
	if c.st.muted.Load() {
		return nil
	}
	// the send time: before the write, so the gateway's receipt is after it
	c.st.lastWrite.Store(c.w.now())
	if err := c.Conn.WriteLine(line); err != nil {
		return err
	}
	if bytes.Equal(line, hbLine) {
		c.w.heartbeats.Add(1)
	}
	return nil
}

func (c *wireConn) ReadLine() ([]byte, error) {
	line, err := c.Conn.ReadLine()
	if err != nil || c.welcomed || !bytes.Contains(line, []byte(`"welcome"`)) {
		return line, err
	}
	var m map[string]any
	if json.Unmarshal(line, &m) != nil || m["op"] != protocol.OpWelcome {
		return line, nil
	}
	c.welcomed = true
	if t, ok := m["timeout_ms"].(float64); ok {
		c.w.timeoutMS.Store(int64(t))
	}
	if c.heartbeat > 0 {
		m["heartbeat_ms"] = c.heartbeat.Milliseconds()
		if b, err := json.Marshal(m); err == nil {
			line = b
		}
	} else if h, ok := m["heartbeat_ms"].(float64); ok {
		c.w.heartbeatMS.Store(int64(h))
	}
	return line, nil
}

// dialFunc returns the DialFunc of one session: its transport, from its
// source address, wrapped in a wireConn.
func (w *worker) dialFunc(st *wireState, g int) client.DialFunc {
	return func(ctx context.Context, addr string, tlsConfig *tls.Config) (client.Conn, error) {
		if st.muted.Load() {
			return nil, errMuted
		}
		local := sourceAddr(addr, g)
		nd := &net.Dialer{}
		if local != nil {
			nd.LocalAddr = local
		}
		var conn client.Conn
		switch {
		case client.IsWebSocketAddr(addr):
			c, err := dialWS(ctx, addr, tlsConfig, nd)
			if err != nil {
				return nil, err
			}
			conn = c
		case tlsConfig != nil:
			d := tls.Dialer{NetDialer: nd, Config: tlsConfig}
			nc, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				return nil, err
			}
			conn = client.NewLineConn(nc)
		default:
			nc, err := nd.DialContext(ctx, "tcp", addr)
			if err != nil {
				return nil, err
			}
			conn = client.NewLineConn(nc)
		}
		if w.cfg.Heartbeat > 0 {
			w.heartbeatMS.Store(w.cfg.Heartbeat.Milliseconds())
		}
		return &wireConn{Conn: conn, st: st, w: w, heartbeat: w.cfg.Heartbeat}, nil
	}
}

// dialWS opens a WebSocket from nd's source address: each protocol line
// is one text message, as client.DialWebSocket does.
func dialWS(ctx context.Context, addr string, tlsConfig *tls.Config, nd *net.Dialer) (client.Conn, error) {
	tr := &http.Transport{DialContext: nd.DialContext, TLSClientConfig: tlsConfig, DisableKeepAlives: true}
	ws, _, err := websocket.Dial(ctx, addr, &websocket.DialOptions{HTTPClient: &http.Client{Transport: tr}})
	if err != nil {
		return nil, fmt.Errorf("websocket %s: %w", addr, err)
	}
	ws.SetReadLimit(16 << 20)
	return &wsConn{ws: ws}, nil
}

type wsConn struct {
	ws *websocket.Conn
	mu sync.Mutex
}

func (c *wsConn) ReadLine() ([]byte, error) {
	typ, b, err := c.ws.Read(context.Background())
	if err != nil {
		return nil, err
	}
	if typ != websocket.MessageText {
		return nil, errors.New("bench: binary websocket message")
	}
	return b, nil
}

func (c *wsConn) WriteLine(line []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.ws.Write(ctx, websocket.MessageText, line)
}

func (c *wsConn) Close() error { return c.ws.CloseNow() }
