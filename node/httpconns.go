package node

import (
	"crypto/tls"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"
)

// Bounds on the HTTP port (and on Config.WSAddr's listener, which serves
// GET /ws the same way). Without them a client could hold a connection and
// its goroutine forever by never finishing a request, or open thousands of
// keep-alive connections and leave them idle:
//
//	per request     HTTPReadHeaderTimeout, HTTPReadTimeout, HTTPWriteTimeout
//	                (event streams are exempt from the last two: each of
//	                their writes gets Config.WriteTimeout of its own)
//	per connection  HTTPIdleTimeout between requests, HTTPMaxHeaderBytes
//	per source IP   MaxConnectionsPerIP, counted together with the client
//	                port's connections: 429 too_many_connections
//	per port        MaxHTTPConnections, the HTTP connections held at once
//	                (every HTTP listener together): 503 overloaded
//
// A connection past a cap is answered at accept, before a byte of its
// request is read: on plain HTTP with a complete response (status, JSON
// body, Connection: close), over TLS by closing it (an answer would need a
// handshake in the accept loop). A WebSocket stops counting as an HTTP
// connection when it is upgraded, and counts as a client connection from
// then on (serveClient).

// Defaults of the HTTP bounds.
const (
	// DefaultHTTPReadHeaderTimeout bounds the reading of a request's
	// headers (and a TLS handshake): a client on a slow mobile link sends
	// a few hundred bytes well within it.
	DefaultHTTPReadHeaderTimeout = 10 * time.Second
	// DefaultHTTPReadTimeout bounds the reading of a whole request. The
	// gateway's requests carry no body but the admin API's small ones.
	DefaultHTTPReadTimeout = 30 * time.Second
	// DefaultHTTPWriteTimeout bounds the writing of a response: generous
	// for a large /v1/sessions, and the longest CPU profile
	// /debug/pprof/profile serves.
	DefaultHTTPWriteTimeout = 60 * time.Second
	// DefaultHTTPIdleTimeout is how long a keep-alive connection may wait
	// for its next request: longer than a scrape interval, so Prometheus
	// reuses its connection.
	DefaultHTTPIdleTimeout = 60 * time.Second
	// MaxHTTPIdleTimeout is the longest HTTPIdleTimeout a Config accepts.
	MaxHTTPIdleTimeout = 2 * time.Minute
	// DefaultHTTPMaxHeaderBytes bounds a request's headers: a token
	// (protocol.MaxTokenLen) and a browser's cookies fit four times over.
	DefaultHTTPMaxHeaderBytes = 32 << 10
	// DefaultMaxHTTPConnections caps the HTTP connections held at once:
	// scrapes, API calls, event streams and WebSockets being upgraded.
	// They come out of the open-file reserve (FileReserve), not out of
	// MaxConnections.
	DefaultMaxHTTPConnections = 1024
	// minHTTPMaxHeaderBytes is the smallest HTTPMaxHeaderBytes a Config
	// accepts: a bearer token of protocol.MaxTokenLen must fit.
	minHTTPMaxHeaderBytes = 16 << 10
	// DefaultIPv6PrefixBits is the IPv6 prefix per-address limits count
	// by: the /64 a host, or a home network, is usually given.
	DefaultIPv6PrefixBits = 64
	// maxRefusalWriters bounds the refusals being written at once; past
	// it a refused connection is closed without an answer.
	maxRefusalWriters = 64
	// refusalLinger is how long a refused connection is read (and its
	// request discarded) after the answer, so that closing it does not
	// reset the connection before the client reads the answer.
	refusalLinger = time.Second
)

// fillHTTP sets the defaults of the HTTP bounds on zero fields.
func (c *Config) fillHTTP() {
	if c.HTTPReadHeaderTimeout == 0 {
		c.HTTPReadHeaderTimeout = DefaultHTTPReadHeaderTimeout
	}
	if c.HTTPReadTimeout == 0 {
		c.HTTPReadTimeout = DefaultHTTPReadTimeout
	}
	if c.HTTPWriteTimeout == 0 {
		c.HTTPWriteTimeout = DefaultHTTPWriteTimeout
	}
	if c.HTTPIdleTimeout == 0 {
		c.HTTPIdleTimeout = DefaultHTTPIdleTimeout
	}
	if c.HTTPMaxHeaderBytes == 0 {
		c.HTTPMaxHeaderBytes = DefaultHTTPMaxHeaderBytes
	}
	if c.MaxHTTPConnections == 0 {
		c.MaxHTTPConnections = DefaultMaxHTTPConnections
	}
	if c.MaxEventStreamsPerSubject == 0 {
		c.MaxEventStreamsPerSubject = DefaultMaxEventStreamsPerSubject
	}
	if c.MaxEventStreamsPerIP == 0 {
		c.MaxEventStreamsPerIP = DefaultMaxEventStreamsPerIP
	}
	if c.IPv6PrefixBits == 0 {
		c.IPv6PrefixBits = DefaultIPv6PrefixBits
	}
}

// httpTimeout is a configured timeout as net/http takes it: negative (no
// timeout) is zero.
func httpTimeout(d time.Duration) time.Duration { return max(d, 0) }

// newHTTPServer returns an http.Server for h under the HTTP bounds.
func (n *Node) newHTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: httpTimeout(n.cfg.HTTPReadHeaderTimeout),
		ReadTimeout:       httpTimeout(n.cfg.HTTPReadTimeout),
		WriteTimeout:      httpTimeout(n.cfg.HTTPWriteTimeout),
		IdleTimeout:       httpTimeout(n.cfg.HTTPIdleTimeout),
		MaxHeaderBytes:    n.cfg.HTTPMaxHeaderBytes,
		ErrorLog:          n.httpErrorLog(),
	}
}

// httpListener returns what an HTTP server of the node serves on l: l
// under the connection caps, over TLS when the node serves TLS.
func (n *Node) httpListener(l net.Listener) net.Listener {
	var served net.Listener = &countingListener{Listener: l, n: n, plain: n.tls == nil,
		writers: make(chan struct{}, maxRefusalWriters)}
	if n.tls != nil {
		served = tls.NewListener(served, n.tls)
	}
	return served
}

// countingListener admits the HTTP connections the caps allow and counts
// them until they close (httpConn).
type countingListener struct {
	net.Listener
	n       *Node
	plain   bool          // a refusal may be answered (no TLS)
	writers chan struct{} // semaphore of refusals being answered
}

// Accept returns the next connection the caps admit; it answers and closes
// the others itself.
func (l *countingListener) Accept() (net.Conn, error) {
	for {
		nc, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		n := l.n
		key := n.sourceKey(nc.RemoteAddr())
		n.mu.Lock()
		status, code, msg := n.admitHTTPLocked(key)
		if status == 0 {
			n.httpConns++
			if key.IsValid() {
				n.perIP[key]++
			}
			n.mu.Unlock()
			return &httpConn{Conn: nc, n: n, key: key}, nil
		}
		n.mu.Unlock()
		l.refuse(nc, status, code, msg)
	}
}

// refuse answers a refused connection with an HTTP error and closes it,
// without waiting: the answer is written on a goroutine of its own, at most
// maxRefusalWriters at once (past them, and over TLS, it is just closed).
func (l *countingListener) refuse(nc net.Conn, status int, code, msg string) {
	if !l.plain {
		nc.Close()
		return
	}
	select {
	case l.writers <- struct{}{}:
	default:
		nc.Close()
		return
	}
	go func() {
		defer func() { <-l.writers }()
		defer nc.Close()
		body := `{"error":` + strconv.Quote(msg) + `,"code":"` + code + `"}` + "\n"
		resp := "HTTP/1.1 " + strconv.Itoa(status) + " " + http.StatusText(status) + "\r\n" +
			"Content-Type: application/json\r\nConnection: close\r\nRetry-After: 1\r\n" +
			"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
		nc.SetDeadline(time.Now().Add(refusalLinger)) //nolint:errcheck // best effort
		if _, err := nc.Write([]byte(resp)); err != nil {
			return
		}
		if tc, ok := nc.(*net.TCPConn); ok {
			tc.CloseWrite() //nolint:errcheck // best effort
		}
		var discard [4096]byte
		for {
			if _, err := nc.Read(discard[:]); err != nil {
				return
			}
		}
	}()
}

// admitHTTPLocked decides whether an accepted HTTP connection from key may
// stay, under MaxHTTPConnections and MaxConnectionsPerIP, and returns the
// HTTP status, error code and message to refuse it with otherwise (status
// 0: admitted). The caller holds n.mu.
func (n *Node) admitHTTPLocked(key netip.Addr) (status int, code, msg string) {
	if max := n.cfg.MaxHTTPConnections; max > 0 && n.httpConns >= max {
		n.stats.httpOverloaded.Add(1)
		return http.StatusServiceUnavailable, "overloaded", "the gateway holds its most HTTP connections (" +
			strconv.Itoa(max) + "); try again later"
	}
	if max := n.limits.Load().MaxConnectionsPerIP; max > 0 && key.IsValid() && n.perIP[key] >= max {
		n.stats.httpTooManyConnections.Add(1)
		return http.StatusTooManyRequests, "too_many_connections", "this address holds " + strconv.Itoa(n.perIP[key]) +
			" connections to the gateway, the most allowed; close one first"
	}
	return 0, "", ""
}

// httpConn is an admitted HTTP connection: it stops counting when it
// closes, or when it is upgraded to a WebSocket (release).
type httpConn struct {
	net.Conn
	n    *Node
	key  netip.Addr
	once sync.Once
}

// release stops counting the connection. Later calls do nothing.
func (c *httpConn) release() {
	c.once.Do(func() {
		c.n.mu.Lock()
		c.n.httpConns--
		c.n.uncountIPLocked(c.key)
		c.n.mu.Unlock()
	})
}

func (c *httpConn) Close() error {
	c.release()
	return c.Conn.Close()
}

// releaseHTTPConn stops counting nc (an upgraded WebSocket's connection,
// possibly under TLS) as an HTTP connection.
func releaseHTTPConn(nc net.Conn) {
	if tc, ok := nc.(*tls.Conn); ok {
		nc = tc.NetConn()
	}
	if hc, ok := nc.(*httpConn); ok {
		hc.release()
	}
}

// HTTPConnections returns the HTTP connections the node holds now.
func (n *Node) HTTPConnections() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.httpConns
}

// streamDeadlines lifts the read and write deadlines net/http set on an
// event stream's connection from the HTTP bounds: the stream reads nothing
// more (net/http's background read, which tells it the client went away,
// would otherwise end it at HTTPReadTimeout), and each of its writes sets
// its own deadline (sseWriter.begin).
func streamDeadlines(rc *http.ResponseController) {
	rc.SetReadDeadline(time.Time{})  //nolint:errcheck // not every writer supports deadlines
	rc.SetWriteDeadline(time.Time{}) //nolint:errcheck // likewise
}
