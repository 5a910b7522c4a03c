package node

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/protocol"
)

// TestConcurrentClientsHeartbeating connects 1,000 clients at once, has each
// heartbeat while a few change status, and checks that heartbeats cost no
// writes and that every session is accounted for at each step.
func TestConcurrentClientsHeartbeating(t *testing.T) {
	const clients, beats = 1000, 5
	fc := &fakeCluster{}
	n := newTestNode(t, func(c *Config) {
		c.Cluster = fc
		c.Heartbeat = 200 * time.Millisecond
		c.Timeout = 10 * time.Second
	})
	addr := n.ClientAddr().String()
	conns := make([]net.Conn, clients)
	readers := make([]*bufio.Reader, clients)
	errs := make(chan error, clients)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64) // bound dial concurrency, not the clients
	for i := range clients {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			nc, err := net.DialTimeout("tcp", addr, 10*time.Second)
			if err != nil {
				errs <- err
				return
			}
			conns[i] = nc
			readers[i] = bufio.NewReader(nc)
			nc.SetDeadline(time.Now().Add(30 * time.Second))
			fmt.Fprintf(nc, `{"op":"hello","user":"u%d","device":"d","groups":["g%d"]}`+"\n", i, i%10)
			line, err := readers[i].ReadString('\n')
			if err != nil || !strings.Contains(line, `"op":"welcome"`) {
				errs <- fmt.Errorf("client %d: %q %v", i, line, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, nc := range conns {
			if nc != nil {
				nc.Close()
			}
		}
	})
	if got := n.SessionCount(); got != clients {
		t.Fatalf("sessions %d", got)
	}
	published := len(fc.published())

	// Every client heartbeats concurrently; every tenth also sets a status.
	errs = make(chan error, clients)
	for i := range clients {
		wg.Go(func() {
			nc, r := conns[i], readers[i]
			for b := range beats {
				if _, err := fmt.Fprintln(nc, `{"op":"hb"}`); err != nil {
					errs <- err
					return
				}
				if i%10 == 0 && b == 0 {
					fmt.Fprintln(nc, `{"op":"status","status":"away","id":"s"}`)
				}
				time.Sleep(time.Duration(rand.IntN(5)) * time.Millisecond)
			}
			fmt.Fprintln(nc, `{"op":"hb","id":"last"}`)
			for {
				line, err := r.ReadString('\n')
				if err != nil {
					errs <- fmt.Errorf("client %d: %v", i, err)
					return
				}
				if strings.Contains(line, `"id":"last"`) {
					if !strings.Contains(line, `"op":"hb"`) {
						errs <- fmt.Errorf("client %d: %s", i, line)
					}
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := len(fc.published()) - published; got != clients/10 {
		t.Fatalf("published %d deltas for %d status changes (heartbeats must not write)", got, clients/10)
	}
	n.mu.Lock()
	online := n.replica.GroupOnlineCount("g3")
	n.mu.Unlock()
	if online != clients/10 {
		t.Fatalf("group g3 online %d", online)
	}
	checkInvariants(t, n)

	// All close at once: every session is disconnected promptly.
	for _, nc := range conns {
		nc.Close()
	}
	waitFor(t, "all sessions to end", func() bool { return n.SessionCount() == 0 })
	if p := presenceOf(n, "u999"); p.Online {
		t.Fatalf("u999 %+v", p)
	}
	checkInvariants(t, n)
}

// TestSlowConsumer checks that a client that does not read is dropped
// without slowing anyone else. It pipelines requests without reading their
// replies: its reads are paced (awaitRoom) until its writer's timeout drops
// it. Messages from others never cut it (TestMessageFloodNeverCutsRecipient).
func TestSlowConsumer(t *testing.T) {
	n := newTestNode(t, func(c *Config) {
		c.MaxLineBytes = 4096
		c.OutboundQueue = 16
		c.OutboundQueueBytes = 32 << 10
		// The others do not heartbeat: keep them through the writer's
		// timeout and the slow client's draining of its socket.
		c.Timeout = time.Minute
		c.WriteTimeout = time.Second
	})
	slow, _ := connect(t, n, "slow", "phone")
	sender, _ := connect(t, n, "sender", "x")
	bystander, _ := connect(t, n, "bystander", "y")
	bystander.ok(map[string]any{"op": "sub", "users": []string{"slow"}})
	bystander.expectEvent("slow")

	// Pipeline gets in batches without reading their replies (the kernel
	// buffers megabytes before the queue even starts to fill).
	users := make([]string, 300)
	for i := range users {
		users[i] = fmt.Sprintf("u%d", i)
	}
	req, _ := json.Marshal(map[string]any{"op": "get", "users": users})
	batch := strings.Repeat(string(req)+"\n", 10)
	start := time.Now()
	for i := 0; n.Stats().SlowConsumers == 0; i++ {
		if i > 10000 || time.Since(start) > 20*time.Second {
			t.Fatalf("no slow consumer after %d batches", i)
		}
		slow.nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(slow.nc, batch); err != nil {
			break // the gateway closed the slow client
		}
	}
	t.Logf("slow consumer detected after %v", time.Since(start))
	// The slow client is told once it reads, then closed; its session ends.
	sawError := false
	for {
		f, err := slow.tryRecv(5 * time.Second)
		if err != nil {
			slow.nc.Close()
			break
		}
		if f.str("op") == protocol.OpError {
			if f.str("code") != string(protocol.CodeSlowConsumer) {
				t.Fatalf("slow got %v", f)
			}
			sawError = true
		}
	}
	if !sawError {
		t.Log("slow client was closed before it could be told (write deadline hit)")
	}
	t.Logf("slow client closed after %v", time.Since(start))
	if e := bystander.expectEvent("slow"); e["online"] != false {
		t.Fatalf("event %v", e)
	}
	if f := sender.ok(map[string]any{"op": "send", "to": "bystander", "body": 1}); f.num("delivered") != 1 {
		t.Fatalf("send %v", f)
	}
	bystander.expect(protocol.OpMessage)
	checkInvariants(t, n)
}

// TestBadInputIsolated throws garbage at the node from several connections
// while a well-behaved client works, and checks nobody else is affected.
func TestBadInputIsolated(t *testing.T) {
	n := newTestNode(t, func(c *Config) { c.MaxLineBytes = 4096 })
	good, gw := connect(t, n, "good", "phone")
	good.ok(map[string]any{"op": "join", "group": "g"})
	garbage := []string{
		"{", "}", "{{}}", `{"op":}`, `{"op":"hello","user":` + strings.Repeat("[", 3000) + `}`,
		"\x00\x01\x02", "\xff\xfe{\"op\":\"hb\"}", `{"op":"hb","id":1e999}`, `{"op":"get","users":[null]}`,
		`{"op":"sub","users":[1,2]}`, `{"op":"send","to":"good"}`, `{"op":"send","to":"good","body":` + strings.Repeat("[", 100) + `}`,
		`{"op":"join","group":"` + strings.Repeat("g", 300) + `"}`, `{"op":"status","status":null}`,
		`{"op":"hello","user":"good","device":"phone","last_epoch":-1}`, `{"op":"hello","user":"a\u0000b"}`,
		`{"op":"account","override":"none","authoritative_device":7}`, `{"op":"hb","op":"bye"}`,
	}
	var wg sync.WaitGroup
	for k := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(1, uint64(k)))
			nc, err := net.Dial("tcp", n.ClientAddr().String())
			if err != nil {
				t.Error(err)
				return
			}
			defer nc.Close()
			go func() { // keep reading so we are no slow consumer
				r := bufio.NewReader(nc)
				for {
					if _, err := r.ReadString('\n'); err != nil {
						return
					}
				}
			}()
			if k%2 == 0 {
				fmt.Fprintf(nc, `{"op":"hello","user":"evil%d"}`+"\n", k)
			}
			for i := range 300 {
				var line string
				if i%3 == 0 {
					b := make([]byte, rng.IntN(200))
					for j := range b {
						b[j] = byte(rng.IntN(256))
					}
					line = strings.ReplaceAll(string(b), "\n", "")
				} else {
					line = garbage[rng.IntN(len(garbage))]
				}
				if _, err := fmt.Fprintln(nc, line); err != nil {
					return
				}
			}
		})
	}
	for range 20 {
		good.call(map[string]any{"op": "hb"})
		good.ok(map[string]any{"op": "status", "status": "away"})
		good.ok(map[string]any{"op": "status", "status": "available"})
	}
	wg.Wait()
	s, ok := sessionOf(n, crdt.Key{User: "good", Device: "phone"})
	if !ok || s.State != crdt.StateActive || s.Epoch != uint64(gw.num("epoch")) || len(s.Groups) != 1 {
		t.Fatalf("good's session %+v", s)
	}
	if f := good.call(map[string]any{"op": "group", "group": "g"}); f.num("online") != 1 {
		t.Fatalf("group %v", f)
	}
	checkInvariants(t, n)
}
