package node

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"
)

// A client that pipelines requests far faster than it reads their replies,
// but does read them, is slowed down (its next requests wait), never cut as
// a slow consumer for its own replies: here 20,000 gets against a queue of
// 64 frames.
func TestPipelinedRequestsArePacedNotCut(t *testing.T) {
	n := newTestNode(t, func(c *Config) {
		c.OutboundQueue = 64
		c.RequestRate = -1 // what is tested is the queue, not the request limit
	})
	c, _ := connect(t, n, "pipeliner", "bot")
	const count = 20000
	line := `{"op":"get","users":["someone","pipeliner"]}` + "\n"
	werr := make(chan error, 1)
	go func() {
		c.nc.SetWriteDeadline(time.Now().Add(60 * time.Second))
		_, err := io.WriteString(c.nc, strings.Repeat(line, count))
		werr <- err
	}()
	prefix := []byte(`{"op":"presence"`)
	for i := range count {
		c.nc.SetReadDeadline(time.Now().Add(60 * time.Second))
		got, err := c.r.ReadLine()
		if err != nil {
			t.Fatalf("reply %d: %v", i, err)
		}
		if !bytes.HasPrefix(got, prefix) {
			t.Fatalf("reply %d: %s", i, got)
		}
	}
	if err := <-werr; err != nil {
		t.Fatalf("write: %v", err)
	}
	if got := n.Stats().SlowConsumers; got != 0 {
		t.Fatalf("%d slow consumers", got)
	}
}
