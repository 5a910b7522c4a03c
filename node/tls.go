package node

import (
	"context"
	"crypto/tls"
	"net"
	"time"

	"go.uber.org/zap"
)

// TLS on the client port. The accept loop only wraps the socket
// (tls.Server does no I/O); the handshake runs on the connection's reader
// goroutine within Config.HandshakeTimeout, so a client that stalls
// mid-handshake holds nothing but its own goroutines and no one else waits
// for it. A handshake that fails is counted (Stats.TLSHandshakeFailures),
// logged at debug level, and the socket is closed.
//
// A connection refused before its handshake (the gateway draining, or at
// MaxConnections) is closed without the plain-text error line a plain TCP
// client gets: writing it would need a handshake in the accept loop.

// serverTLS returns the configuration the node's listeners use: c with TLS
// 1.2 at least, also for the configurations its GetConfigForClient returns.
func serverTLS(c *tls.Config) *tls.Config {
	if c == nil {
		return nil
	}
	c = c.Clone()
	c.MinVersion = max(c.MinVersion, tls.VersionTLS12)
	if get := c.GetConfigForClient; get != nil {
		c.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			cc, err := get(hello)
			if err != nil || cc == nil || cc.MinVersion >= tls.VersionTLS12 {
				return cc, err
			}
			cc = cc.Clone()
			cc.MinVersion = tls.VersionTLS12
			return cc, nil
		}
	}
	return c
}

// handshakeTLS runs the TLS handshake of a client connection within
// deadline (readLoop's: HandshakeTimeout from accept) and reports whether it
// succeeded.
func (c *conn) handshakeTLS(deadline time.Time) bool {
	c.nc.SetDeadline(deadline) //nolint:errcheck // a failed deadline shows up as a handshake error
	if err := c.tls.HandshakeContext(context.Background()); err != nil {
		c.n.stats.tlsHandshakeFailures.Add(1)
		c.n.log.Debug("tls handshake failed", zap.Uint64("conn", c.id), zap.String("remote", c.remote), zap.Error(err))
		return false
	}
	return true
}

// wrapTLS returns the connection a client socket is served on: raw itself,
// or a TLS server connection over it when the node serves TLS.
func (n *Node) wrapTLS(raw net.Conn) (net.Conn, *tls.Conn) {
	if n.tls == nil {
		return raw, nil
	}
	tc := tls.Server(raw, n.tls)
	return tc, tc
}
