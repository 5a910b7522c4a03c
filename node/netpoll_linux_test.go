package node

import (
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Requests that arrive together are answered together: the replies to the
// lines of one read leave in one write, not one write each.
func TestRepliesToOneReadLeaveInOneWrite(t *testing.T) {
	if testTransport != "tcp" && testTransport != "uring" {
		t.Skip("the event loop serves plain TCP on Linux")
	}
	n := newTestNode(t, nil)
	c, _ := connect(t, n, "alice", "phone")
	writes := func() uint64 {
		var w uint64
		for _, p := range n.polls.ps {
			w += p.writes.Load()
		}
		return w
	}
	const k = 8
	var b strings.Builder
	for i := range k {
		b.WriteString(`{"op":"hb","id":` + strconv.Itoa(i) + "}\n")
	}
	before := writes()
	// One write of a few hundred bytes on loopback: one segment, one read.
	c.sendRaw(strings.TrimSuffix(b.String(), "\n"))
	for i := range k {
		if f := c.expect("hb"); f.num("id") != float64(i) {
			t.Fatalf("reply %v, want id %d", f, i)
		}
	}
	if w := writes() - before; w > 2 {
		t.Fatalf("%d replies to one read took %d writes, want them together", k, w)
	}
}

// -transport=uring runs the suite on the event loop's io_uring mode: the
// pollers have their rings, unless the kernel refuses io_uring.
func TestIOUringModeIsOn(t *testing.T) {
	if testTransport != "uring" {
		t.Skip("-transport=uring only")
	}
	n := newTestNode(t, nil)
	for i, p := range n.polls.ps {
		if p.ring == nil {
			t.Skipf("poller %d uses epoll: the kernel refused io_uring (see the log)", i)
		}
	}
	c, _ := connect(t, n, "alice", "phone")
	c.sendRaw(`{"op":"hb","id":7}`)
	if f := c.expect("hb"); f.num("id") != 7 {
		t.Fatalf("reply %v, want id 7", f)
	}
}

// A client that floods the node with requests without reading the
// replies, and then closes, is finished: its session ends and its
// connection is let go, whatever the event loop's mode.
func TestFloodThenCloseFinishes(t *testing.T) {
	if testTransport != "tcp" && testTransport != "uring" {
		t.Skip("the event loop serves plain TCP on Linux")
	}
	n := newTestNode(t, nil)
	var wg sync.WaitGroup
	for i := range 8 {
		c, _ := connect(t, n, "flood"+strconv.Itoa(i), "d")
		wg.Add(1)
		go func() {
			defer wg.Done()
			line := []byte(strings.Repeat(`{"op":"hb","id":1}`+"\n", 200))
			deadline := time.Now().Add(500 * time.Millisecond)
			for time.Now().Before(deadline) {
				c.nc.SetWriteDeadline(deadline)
				if _, err := c.nc.Write(line); err != nil {
					break
				}
			}
			c.nc.Close()
		}()
	}
	wg.Wait()
	waitFor(t, "the flooders' connections to close", func() bool { return n.Stats().Connections == 0 })
}
