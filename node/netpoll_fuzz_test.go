//go:build linux

package node

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rollcall/rollcall/internal/testkit"
)

// FuzzEventLoopLines checks the event loop's line splitter (conn.consume,
// lines and hold: a partial line kept between reads, completed by the
// next, line_too_long past MaxLineBytes) against the reader of the
// goroutine path (protocol.Reader). The input stream, sent to a node
// served by the event loop in reads cut where the input says, and whole
// to a node served by goroutines, must get the same replies, byte for
// byte, in the same order: the same lines were handed to the same request
// handling. Both nodes require tokens, so a hello fails alike, and have no
// request rate limit; the stream ends with a heartbeat whose reply marks
// its end. Seed corpus: testdata/fuzz/FuzzEventLoopLines.
func FuzzEventLoopLines(f *testing.F) {
	long := strings.Repeat("x", 1100)
	for _, s := range []struct {
		data string
		cuts []byte
	}{
		{`{"op":"hb","id":1}` + "\n" + `{"op":"get","users":["a"],"id":2}` + "\r\n", []byte{3, 7}},
		{"\n\n  \r\n" + `{"op":"hb"}` + "\n" + `{"op":"hb","id":"x"}`, []byte{1, 1, 1, 1, 1}},
		{`{"op":` + "\n" + `not json` + "\n" + `{"op":"nope","id":[1]}` + "\n", []byte{200}},
		{`{"op":"sub","users":["a"],"id":3}` + "\n" + `{"op":"hb","id":4}`, []byte{20, 0, 1}},
		{`{"op":"hb","id":5}` + "\n" + long + "\n" + `{"op":"hb","id":6}` + "\n", []byte{10, 255, 255, 255, 255, 100}},
		{long[:1000] + "\n" + long[:1023] + "\r\n" + `{"op":"hb","id":7}` + "\n", []byte{255, 255, 255, 255, 8}},
		{`{"op":"hello","user":"u","token":"t","id":8}` + "\n" + `{"op":"hb","id":9}` + "\n", []byte{5, 5}},
		{long + long, []byte{255, 255, 255, 255, 255, 255, 255, 255}},
	} {
		f.Add([]byte(s.data), s.cuts)
	}
	mk := func(goroutines bool) *Node {
		return newTestNode(f, func(c *Config) {
			c.Dev, c.Secret = false, testSecret
			c.GoroutineIO = goroutines
			c.HTTPAddr = ""
			c.MaxLineBytes = MinMaxLineBytes
			c.RequestRate = -1
			c.UserHelloRate, c.IPHelloRate = -1, -1
			c.MaxConnectionsPerIP = -1
			c.HandshakeTimeout = time.Minute
		})
	}
	loop, goroutines := mk(false), mk(true)
	f.Fuzz(func(t *testing.T, data, cuts []byte) {
		if len(data) > 64<<10 {
			return
		}
		var chunks [][]byte
		rest := data
		for _, c := range cuts {
			if len(rest) == 0 {
				break
			}
			k := min(len(rest), 1+int(c)*8)
			chunks = append(chunks, rest[:k])
			rest = rest[k:]
		}
		if len(rest) > 0 {
			chunks = append(chunks, rest)
		}
		want := replyStream(t, goroutines, [][]byte{data}, false)
		got := replyStream(t, loop, chunks, true)
		if !bytes.Equal(got, want) {
			t.Fatalf("the event loop replied\n%s\nthe goroutine reader replied\n%s", got, want)
		}
	})
}

// endMark ends the stream: its reply (not_authenticated, with this id) is
// the last line, unless the connection closed first.
const endMark = `{"op":"hb","id":"end-of-input"}`

// replyStream sends chunks to n on a new connection, then a newline and
// endMark, and returns the reply lines up to the reply to endMark or the
// connection's end. With cut set, each chunk is written once the node's
// event loop has read the one before from the socket, so each is a read
// of its own.
func replyStream(t *testing.T, n *Node, chunks [][]byte, cut bool) []byte {
	t.Helper()
	nc, err := net.Dial("tcp", n.ClientAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(30 * time.Second)) //nolint:errcheck // a bound on a stuck test, not a timing assertion
	type result struct {
		replies []byte
		err     error
	}
	done := make(chan result, 1)
	go func() {
		var out []byte
		br := bufio.NewReader(nc)
		for {
			line, err := br.ReadBytes('\n')
			out = append(out, line...)
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				done <- result{out, err}
				return
			}
			var h struct {
				ID json.RawMessage `json:"id"`
			}
			if json.Unmarshal(line, &h) == nil && string(h.ID) == `"end-of-input"` {
				done <- result{out, nil}
				return
			}
		}
	}()
	var sc *conn
	if cut {
		sc = serverConn(t, n, nc.LocalAddr().String())
	}
	for _, c := range chunks {
		if _, err := nc.Write(c); err != nil {
			break // the node closed the connection (line_too_long, auth_failed)
		}
		if sc != nil {
			waitRead(t, sc)
		}
	}
	nc.Write([]byte("\n" + endMark + "\n")) //nolint:errcheck // the connection may be closed already
	res := <-done
	if res.err != nil {
		t.Fatalf("reading replies: %v (so far %q)", res.err, res.replies)
	}
	return res.replies
}

// serverConn returns the node's connection of the client at addr.
func serverConn(t *testing.T, n *Node, addr string) *conn {
	t.Helper()
	var found *conn
	waitSoon(t, "the node's connection", func() bool {
		n.mu.Lock()
		defer n.mu.Unlock()
		for c := range n.conns {
			if c.remote == addr {
				found = c
				return true
			}
		}
		return false
	})
	if found.poll == nil {
		t.Fatal("the connection is not on the event loop")
	}
	return found
}

// waitRead waits until the event loop has read everything the socket
// holds, or stopped reading it (paused or finished).
func waitRead(t *testing.T, c *conn) {
	t.Helper()
	waitSoon(t, "the event loop to read the chunk", func() bool {
		c.rmu.Lock()
		stopped := c.paused || c.finished
		c.rmu.Unlock()
		if stopped {
			return true
		}
		c.wmu.Lock()
		defer c.wmu.Unlock()
		if c.fd < 0 {
			return true
		}
		k, err := unix.IoctlGetInt(c.fd, unix.SIOCINQ)
		return err != nil || k == 0
	})
}

// waitSoon is testkit.WaitFor that first checks cond a few thousand times
// in a row, yielding in between: what it waits for is usually a few
// microseconds away, and fuzzing runs it for every chunk.
func waitSoon(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 5000 {
		if cond() {
			return
		}
		runtime.Gosched()
	}
	testkit.WaitFor(t, 10*time.Second, what, cond)
}
