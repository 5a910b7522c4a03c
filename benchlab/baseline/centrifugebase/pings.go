package centrifugebase

import (
	"context"
	"net"
	"sync/atomic"
)

// pingCounter counts the server's pings on a client connection: with
// Centrifuge's JSON protocol a ping is an empty reply, a line "{}" of a
// WebSocket text message (the server may put several replies, one a
// line, in one message). It reads the server's frames as they pass,
// which are unmasked; compressed messages (not negotiated by the load)
// are not looked into.
type pingCounter struct {
	pings *atomic.Int64

	upgraded bool // the HTTP upgrade response has been read
	crlf     int  // bytes of "\r\n\r\n" at the end of what was read of it

	hdr    [14]byte // the frame header being read
	hdrLen int      // bytes of it read
	need   int      // header bytes needed (2 until the length is known)
	left   uint64   // payload bytes of the current frame still to read
	data   bool     // the current frame's payload is looked into
	line   int      // the line so far: 0 empty, 1 "{", 2 "{}", -1 anything else
}

func newPingCounter(pings *atomic.Int64) *pingCounter {
	return &pingCounter{pings: pings, need: 2}
}

// feed reads the next bytes the server sent.
func (p *pingCounter) feed(b []byte) {
	for len(b) > 0 {
		if !p.upgraded {
			// the response to the upgrade request ends with an empty line
			c := b[0]
			b = b[1:]
			switch {
			case c == "\r\n\r\n"[p.crlf]:
				p.crlf++
			case c == '\r':
				p.crlf = 1
			default:
				p.crlf = 0
			}
			p.upgraded = p.crlf == 4
			continue
		}
		if p.left == 0 && p.hdrLen < p.need {
			p.hdr[p.hdrLen] = b[0]
			p.hdrLen++
			b = b[1:]
			if p.hdrLen == 2 {
				switch p.hdr[1] & 0x7f {
				case 126:
					p.need = 4
				case 127:
					p.need = 10
				}
				if p.hdr[1]&0x80 != 0 { // masked: not from a server, but skip the key
					p.need += 4
				}
			}
			if p.hdrLen == p.need {
				p.startFrame()
			}
			continue
		}
		n := min(uint64(len(b)), p.left)
		if p.data {
			for _, c := range b[:n] {
				p.byte(c)
			}
		}
		b = b[n:]
		p.left -= n
		if p.left == 0 {
			p.endFrame()
		}
	}
}

// startFrame takes the header read.
func (p *pingCounter) startFrame() {
	h := p.hdr[:p.hdrLen]
	switch l := uint64(h[1] & 0x7f); l {
	case 126:
		p.left = uint64(h[2])<<8 | uint64(h[3])
	case 127:
		p.left = 0
		for _, c := range h[2:10] {
			p.left = p.left<<8 | uint64(c)
		}
	default:
		p.left = l
	}
	op := h[0] & 0x0f
	compressed := h[0]&0x40 != 0
	// text, binary or continuation frames carry the message; control
	// frames (8 and up) may come between a message's fragments
	p.data = op < 8 && !compressed
	if p.left == 0 {
		p.endFrame()
	}
}

// endFrame ends the current frame and, with FIN on a data frame, the
// message and its last line.
func (p *pingCounter) endFrame() {
	h := p.hdr[0]
	if h&0x0f < 8 && h&0x80 != 0 {
		p.endLine()
	}
	p.hdrLen, p.need, p.left, p.data = 0, 2, 0, false
}

func (p *pingCounter) byte(c byte) {
	switch {
	case c == '\n':
		p.endLine()
	case c == '{' && p.line == 0:
		p.line = 1
	case c == '}' && p.line == 1:
		p.line = 2
	default:
		p.line = -1
	}
}

func (p *pingCounter) endLine() {
	if p.line == 2 {
		p.pings.Add(1)
	}
	p.line = 0
}

// countingConn is a client connection whose reads are fed to a
// pingCounter.
type countingConn struct {
	net.Conn
	p *pingCounter
}

func (c *countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.p.feed(b[:n])
	return n, err
}

// countingDialer dials TCP connections whose server pings are counted in
// pings.
func countingDialer(pings *atomic.Int64) func(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &countingConn{Conn: c, p: newPingCounter(pings)}, nil
	}
}
