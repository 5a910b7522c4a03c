package node

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rollcall/rollcall/protocol"
)

// The read path over a raw TCP stream: requests arrive in whatever pieces
// the network makes, and each is answered once it is complete, however it
// was cut. On the event loop the tests make sure of the cut they name (the
// server holds exactly the first piece before the rest is sent); served by
// goroutines, the pieces are separate writes.

// chunk is the event loop's read buffer (readChunk in netpoll_linux.go).
const chunk = 64 << 10

func skipUnlessStream(t *testing.T) {
	t.Helper()
	if testTransport == "ws" {
		t.Skip("a WebSocket message is a whole line")
	}
}

// heldInput returns the bytes of a partial line the event loop holds for
// n's only connection, or -1 when it is served by goroutines.
func heldInput(t *testing.T, n *Node) int {
	t.Helper()
	n.mu.Lock()
	var cs []*conn
	for c := range n.conns {
		cs = append(cs, c)
	}
	n.mu.Unlock()
	if len(cs) != 1 {
		t.Fatalf("%d connections, want 1", len(cs))
	}
	c := cs[0]
	if c.poll == nil {
		return -1
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	return len(c.in)
}

// sendPiece writes raw bytes and, on the event loop, waits until the
// server has read them all and holds them as a partial line (held bytes
// in all).
func sendPiece(t *testing.T, n *Node, c *client, piece string, held int) {
	t.Helper()
	c.nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c.nc, piece); err != nil {
		t.Fatalf("write: %v", err)
	}
	if heldInput(t, n) < 0 {
		return
	}
	waitFor(t, fmt.Sprintf("the server to hold %d bytes of a partial line", held), func() bool {
		return heldInput(t, n) == held
	})
}

// hbWithID is a heartbeat request with id, padded with JSON whitespace to
// size bytes (newline excluded).
func hbWithID(id, size int) string {
	s := `{"op":"hb","id":` + strconv.Itoa(id)
	return s + strings.Repeat(" ", max(0, size-len(s)-1)) + "}"
}

func expectHB(t *testing.T, c *client, id int) {
	t.Helper()
	f := c.expect("hb")
	if f.num("id") != float64(id) {
		t.Fatalf("reply %v, want the heartbeat with id %d", f, id)
	}
}

// A request cut anywhere, the newline alone in the second piece included,
// is answered once, when its second piece arrives.
func TestRequestCutAcrossReads(t *testing.T) {
	skipUnlessStream(t)
	n := newTestNode(t, nil)
	c, _ := connect(t, n, "alice", "phone")
	line := hbWithID(7, 0) + "\n"
	for cut := 1; cut < len(line); cut++ {
		sendPiece(t, n, c, line[:cut], cut)
		sendPiece(t, n, c, line[cut:], 0)
		expectHB(t, c, 7)
	}
	c.expectQuiet(50 * time.Millisecond) // one reply per request, no more
}

// Complete requests and the start of the next, in one read: the complete
// ones are answered at once, in order, and the partial one when the rest
// arrives.
func TestRequestsAndPartialInOneRead(t *testing.T) {
	skipUnlessStream(t)
	n := newTestNode(t, nil)
	c, _ := connect(t, n, "alice", "phone")
	third := hbWithID(3, 0) + "\n"
	sendPiece(t, n, c, hbWithID(1, 0)+"\n"+hbWithID(2, 0)+"\n"+third[:5], 5)
	expectHB(t, c, 1)
	expectHB(t, c, 2)
	// The rest of the third and a whole fourth, again in one piece.
	sendPiece(t, n, c, third[5:]+hbWithID(4, 0)+"\n", 0)
	expectHB(t, c, 3)
	expectHB(t, c, 4)
}

// Requests as long as the buffer the event loop reads into, and longer:
// a line that fills a read exactly (its newline the buffer's last byte),
// one that ends a byte short of it or a byte past it, with the next
// request right behind it in the same write, all answered in order.
func TestRequestsAroundTheReadBuffer(t *testing.T) {
	skipUnlessStream(t)
	n := newTestNode(t, func(c *Config) { c.MaxLineBytes = 3 * chunk })
	c, _ := connect(t, n, "alice", "phone")
	id := 0
	for _, size := range []int{chunk - 2, chunk - 1, chunk, chunk + 1, 2*chunk - 1, 2 * chunk, 3*chunk - 1} {
		var b strings.Builder
		id++
		b.WriteString(hbWithID(id, size) + "\n")
		id++
		b.WriteString(hbWithID(id, 0) + "\n")
		c.nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c.nc, b.String()); err != nil {
			t.Fatalf("write: %v", err)
		}
		expectHB(t, c, id-1)
		expectHB(t, c, id)
	}
	// A request cut where the buffer ends, its rest sent once the server
	// holds the first piece.
	line := hbWithID(100, 2*chunk) + "\n"
	sendPiece(t, n, c, line[:chunk], chunk)
	sendPiece(t, n, c, line[chunk:], 0)
	expectHB(t, c, 100)
}

// A request of exactly MaxLineBytes is served; one byte more closes the
// connection with line_too_long, even when it comes in pieces.
func TestLineLimitAcrossReads(t *testing.T) {
	skipUnlessStream(t)
	const limit = chunk + chunk/2
	n := newTestNode(t, func(c *Config) { c.MaxLineBytes = limit })
	c, _ := connect(t, n, "alice", "phone")
	c.sendRaw(hbWithID(1, limit))
	expectHB(t, c, 1)
	long := hbWithID(2, limit+1)
	sendPiece(t, n, c, long[:chunk-10], chunk-10)
	c.nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c.nc, long[chunk-10:]+"\n"); err != nil {
		t.Fatalf("write: %v", err)
	}
	c.expectError(protocol.CodeLineTooLong)
	c.expectClosed()
}

// A client that writes its last request and closes its side in one go gets
// the reply (on the event loop: served by goroutines, the reader may close
// the socket before the writer has written it), then the server's close; a
// partial line before the close is dropped, and the session ends either way.
func TestEOFAfterInput(t *testing.T) {
	skipUnlessStream(t)
	n := newTestNode(t, nil)
	for _, tail := range []string{"", `{"op":"hb","id":9`} {
		c, _ := connect(t, n, "alice", "phone")
		c.nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c.nc, hbWithID(8, 0)+"\n"+tail); err != nil {
			t.Fatalf("write: %v", err)
		}
		if err := c.nc.(*net.TCPConn).CloseWrite(); err != nil {
			t.Fatal(err)
		}
		closed := false
		if testTransport == "tcp" || testTransport == "uring" {
			expectHB(t, c, 8)
		} else if f, err := c.tryRecv(5 * time.Second); err == nil && (f.str("op") != "hb" || f.num("id") != 8) {
			t.Fatalf("got %v, want the heartbeat's reply or the close", f)
		} else if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatal("connection still open")
			}
			c.nc.Close()
			closed = true
		}
		if !closed {
			c.expectClosed()
		}
		waitFor(t, "the session to end", func() bool { return len(presenceOf(n, "alice").Sessions) == 0 })
	}
}
