package client

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"time"
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
	return &lineConn{nc: nc, r: bufio.NewReaderSize(nc, 64<<10), wsem: make(chan struct{}, 1)}
}

type lineConn struct {
	nc   net.Conn
	r    *bufio.Reader
	wsem chan struct{} // one writer at a time
}

var errLineTooLong = errors.New("rollcall: line from the gateway too long")

func (c *lineConn) ReadLine() ([]byte, error) {
	var line []byte
	for {
		frag, err := c.r.ReadSlice('\n')
		line = append(line, frag...)
		if len(line) > maxLine {
			return nil, errLineTooLong
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			return nil, err
		}
		line = line[:len(line)-1]
		if n := len(line); n > 0 && line[n-1] == '\r' {
			line = line[:n-1]
		}
		return line, nil
	}
}

func (c *lineConn) WriteLine(line []byte) error {
	c.wsem <- struct{}{}
	defer func() { <-c.wsem }()
	_ = c.nc.SetWriteDeadline(time.Now().Add(writeTimeout))
	buf := make([]byte, 0, len(line)+1)
	buf = append(append(buf, line...), '\n')
	_, err := c.nc.Write(buf)
	return err
}

func (c *lineConn) Close() error { return c.nc.Close() }
