package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/rollcall/rollcall/protocol"
)

// Conn is one connection to a gateway carrying protocol lines: the seam
// where another transport (a WebSocket, one text message per line) plugs in.
// ReadLine is called from one goroutine; WriteLine may be called from
// several, and must not interleave lines.
type Conn interface {
	// ReadLine returns the next line, without its newline.
	ReadLine() ([]byte, error)
	// WriteLine sends one line; the newline is added by the transport.
	WriteLine(line []byte) error
	// Close closes the connection; a blocked ReadLine returns.
	Close() error
}

// DialFunc opens a Conn to a gateway address. tlsConfig is Config.TLS.
type DialFunc func(ctx context.Context, addr string, tlsConfig *tls.Config) (Conn, error)

// maxLine is the longest line accepted from a gateway (protocol.MaxLineBytes
// is the request side; replies such as a large group are longer).
const maxLine = 16 << 20

// writeTimeout bounds one write to the gateway.
const writeTimeout = 10 * time.Second

// DialTCP is the default DialFunc: newline-delimited JSON over TCP, or over
// TLS when tlsConfig is set.
func DialTCP(ctx context.Context, addr string, tlsConfig *tls.Config) (Conn, error) {
	var nc net.Conn
	var err error
	if tlsConfig != nil {
		d := tls.Dialer{Config: tlsConfig}
		nc, err = d.DialContext(ctx, "tcp", addr)
	} else {
		var d net.Dialer
		nc, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return nil, err
	}
	return NewLineConn(nc), nil
}

// NewLineConn wraps a stream (TCP, TLS, a pipe) as a Conn of newline-
// delimited lines.
func NewLineConn(nc net.Conn) Conn {
	return &lineConn{nc: nc, r: protocol.NewReader(nc, 64<<10, maxLine), wsem: make(chan struct{}, 1)}
}

type lineConn struct {
	nc   net.Conn
	r    *protocol.Reader
	wsem chan struct{} // one writer at a time
}

// errLineTooLong is a line from the gateway longer than maxLine.
var errLineTooLong = fmt.Errorf("rollcall: line from the gateway too long: %w", protocol.ErrLineTooLong)

func (c *lineConn) ReadLine() ([]byte, error) {
	line, err := c.r.ReadLine()
	if errors.Is(err, protocol.ErrLineTooLong) {
		return nil, errLineTooLong
	}
	// The reader's slice is reused; a reply line outlives the next read.
	return bytes.Clone(line), err
}

func (c *lineConn) WriteLine(line []byte) error {
	c.wsem <- struct{}{}
	defer func() { <-c.wsem }()
	_ = c.nc.SetWriteDeadline(time.Now().Add(writeTimeout))
	_, err := c.nc.Write(protocol.AppendLine(make([]byte, 0, len(line)+1), line))
	return err
}

func (c *lineConn) Close() error { return c.nc.Close() }
