package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/coder/websocket"
)

// DialWebSocket is a DialFunc for gateways reached over WebSocket: addr is
// a ws:// or wss:// URL of a gateway's /ws endpoint (e.g.
// "wss://gw1.example.com:8080/ws"). Each protocol line is one text message.
// tlsConfig, when set, is used for wss.
func DialWebSocket(ctx context.Context, addr string, tlsConfig *tls.Config) (Conn, error) {
	opts := &websocket.DialOptions{}
	if tlsConfig != nil {
		opts.HTTPClient = &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig}}
	}
	ws, _, err := websocket.Dial(ctx, addr, opts)
	if err != nil {
		return nil, err
	}
	ws.SetReadLimit(maxLine)
	return &wsConn{ws: ws}, nil
}

// DialAny is the default DialFunc: a ws:// or wss:// address goes over
// WebSocket (DialWebSocket), anything else is host:port over TCP or TLS
// (DialTCP).
func DialAny(ctx context.Context, addr string, tlsConfig *tls.Config) (Conn, error) {
	if IsWebSocketAddr(addr) {
		return DialWebSocket(ctx, addr, tlsConfig)
	}
	return DialTCP(ctx, addr, tlsConfig)
}

// IsWebSocketAddr reports whether addr is a ws:// or wss:// URL.
func IsWebSocketAddr(addr string) bool {
	return strings.HasPrefix(addr, "ws://") || strings.HasPrefix(addr, "wss://")
}

type wsConn struct {
	ws *websocket.Conn
	mu sync.Mutex // one writer at a time
}

var errBinaryMessage = errors.New("rollcall: binary message from the gateway")

func (c *wsConn) ReadLine() ([]byte, error) {
	typ, b, err := c.ws.Read(context.Background())
	if err != nil {
		return nil, err
	}
	if typ != websocket.MessageText {
		return nil, errBinaryMessage
	}
	return b, nil
}

func (c *wsConn) WriteLine(line []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	if err := c.ws.Write(ctx, websocket.MessageText, line); err != nil {
		return fmt.Errorf("rollcall: websocket write: %w", err)
	}
	return nil
}

// Close closes the socket at once: the session's end is said by bye before
// it, and a closed socket is a clean close to the gateway.
func (c *wsConn) Close() error { return c.ws.CloseNow() }
