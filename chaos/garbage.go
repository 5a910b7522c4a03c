package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"time"
)

// Garbage on a gateway's ports: the gateway must shrug it off, and the
// promises hold for everyone else meanwhile.

// garbageClient opens a few connections to a client port and writes junk
// on each: random bytes, lines that are not JSON or not requests, a line
// over the 64 KiB limit, invalid UTF-8, absurd hellos, a connection that
// says nothing. It returns a one-line summary.
func garbageClient(ctx context.Context, rng *rand.Rand, addr string) string {
	payloads := [][]byte{
		randBytes(rng, 1+rng.IntN(4096)),
		[]byte("{not json\n{\"op\":42}\n[1,2,3]\n\"hello\"\n{\"op\":\"nope\"}\n"),
		[]byte("{\"op\":\"hb\"}\n{\"op\":\"get\",\"users\":[\"u01\"]}\n{\"op\":\"hello\"}\n"),
		append([]byte("{\"op\":\"hello\",\"user\":\""+strings.Repeat("a", 70<<10)), "\"}\n"...),
		[]byte("{\"op\":\"hello\",\"user\":\"\xff\xfe\",\"device\":\"\x00\"}\n"),
		[]byte("{\"op\":\"hello\",\"user\":\"chaos-garbage\",\"status\":\"sleepy\",\"groups\":7}\n"),
		{},
	}
	wrote := 0
	for _, p := range payloads {
		if ctx.Err() != nil {
			break
		}
		nc, err := dialConn(ctx, addr)
		if err != nil {
			continue
		}
		nc.SetDeadline(time.Now().Add(300 * time.Millisecond)) //nolint:errcheck // best effort
		if n, err := nc.Write(p); err == nil {
			wrote += n
		}
		buf := make([]byte, 4096)
		_, _ = nc.Read(buf) // whatever the gateway answers
		nc.Close()
	}
	return fmt.Sprintf("%d connections, %d bytes", len(payloads), wrote)
}

// garbageGossip sends random UDP packets (some starting with a plausible
// memberlist message type) and a few TCP streams of junk to a gossip port.
func garbageGossip(ctx context.Context, rng *rand.Rand, addr string) string {
	packets, streams := 0, 0
	if uc, err := net.Dial("udp", addr); err == nil {
		for range 40 {
			p := randBytes(rng, 1+rng.IntN(1400))
			if rng.IntN(2) == 0 {
				p[0] = byte(rng.IntN(14)) // memberlist's message types are 0..13
			}
			if _, err := uc.Write(p); err == nil {
				packets++
			}
		}
		uc.Close()
	}
	for range 3 {
		if ctx.Err() != nil {
			break
		}
		nc, err := dialConn(ctx, addr)
		if err != nil {
			continue
		}
		nc.SetDeadline(time.Now().Add(300 * time.Millisecond)) //nolint:errcheck // best effort
		p := randBytes(rng, 1+rng.IntN(8192))
		p[0] = byte(rng.IntN(14))
		if _, err := nc.Write(p); err == nil {
			streams++
		}
		nc.Close()
	}
	return fmt.Sprintf("%d udp packets, %d tcp streams", packets, streams)
}

func randBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}
