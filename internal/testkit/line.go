package testkit

import (
	"encoding/json"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/rollcall/rollcall/protocol"
)

// ReceivedAt is the key under which LineClient stamps each frame it reads
// with the time it read it (a time.Time), for tests that time delivery.
const ReceivedAt = "_at"

// LineClient speaks the client protocol on a connection, as a test's
// client: it says hello, then a goroutine reads every frame into a queue
// that Expect takes from. Writes are safe for concurrent use (Heartbeat
// writes from a goroutine of its own). The connection is closed when the
// test ends.
type LineClient struct {
	t    testing.TB
	conn net.Conn
	name string // the user, for messages
	in   chan map[string]any

	mu       sync.Mutex // guards writes
	stop     chan struct{}
	stopOnce sync.Once

	// Welcome is the gateway's welcome frame.
	Welcome map[string]any
}

// DialLine connects to a gateway's client address and says hello as
// user/device, with the extra hello fields given (nil: none).
func DialLine(t testing.TB, addr, user, device string, extra map[string]any) *LineClient {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return NewLineClient(t, conn, user, device, extra)
}

// NewLineClient says hello on conn and waits (up to 10s) for the welcome.
func NewLineClient(t testing.TB, conn net.Conn, user, device string, extra map[string]any) *LineClient {
	t.Helper()
	c := &LineClient{t: t, conn: conn, name: user, in: make(chan map[string]any, 1024), stop: make(chan struct{})}
	t.Cleanup(c.Close)
	go c.read()
	hello := map[string]any{"op": protocol.OpHello, "user": user, "device": device}
	for k, v := range extra {
		hello[k] = v
	}
	c.Send(hello)
	c.Welcome = c.Expect(protocol.OpWelcome, 10*time.Second)
	return c
}

// read queues every frame until the connection ends, then closes the
// queue.
func (c *LineClient) read() {
	defer close(c.in)
	lr := protocol.NewReader(c.conn, 64<<10, 1<<20)
	for {
		line, err := lr.ReadLine()
		if err != nil {
			return
		}
		var m map[string]any
		if json.Unmarshal(line, &m) == nil {
			m[ReceivedAt] = time.Now()
			c.in <- m
		}
	}
}

// Send writes a request, failing the test if the write fails.
func (c *LineClient) Send(m map[string]any) {
	c.t.Helper()
	if err := c.Write(m); err != nil {
		c.t.Fatalf("%s: write: %v", c.name, err)
	}
}

// Write writes a request and returns the write's error: for a test where
// the gateway may have closed the connection.
func (c *LineClient) Write(m map[string]any) error {
	b, err := protocol.Marshal(m)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = c.conn.SetWriteDeadline(time.Now().Add(5 * time.Second)) // a failed deadline fails the write
	_, err = c.conn.Write(b)
	return err
}

// Expect returns the next frame whose op is op, skipping the others, and
// fails the test if the connection ends first, if none comes within the
// bound, or, unless op is "error", if an error frame comes first.
func (c *LineClient) Expect(op string, within time.Duration) map[string]any {
	c.t.Helper()
	timer := time.NewTimer(within)
	defer timer.Stop()
	for {
		select {
		case m, ok := <-c.in:
			if !ok {
				c.t.Fatalf("%s: connection closed while waiting for %q", c.name, op)
			}
			if m["op"] == op {
				return m
			}
			if m["op"] == protocol.OpError && op != protocol.OpError {
				c.t.Fatalf("%s: error while waiting for %q: %v", c.name, op, m)
			}
		case <-timer.C:
			c.t.Fatalf("%s: no %q within %v", c.name, op, within)
		}
	}
}

// Heartbeat sends a plain heartbeat every interval from a goroutine of its
// own until the client closes or a write fails.
func (c *LineClient) Heartbeat(every time.Duration) {
	go func() {
		tk := time.NewTicker(every)
		defer tk.Stop()
		for {
			select {
			case <-c.stop:
				return
			case <-tk.C:
				if c.Write(map[string]any{"op": protocol.OpHB}) != nil {
					return
				}
			}
		}
	}()
}

// Close stops the heartbeats and closes the connection; it may be called
// more than once.
func (c *LineClient) Close() {
	c.stopOnce.Do(func() { close(c.stop) })
	_ = c.conn.Close()
}
