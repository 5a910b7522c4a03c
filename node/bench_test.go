package node

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/rollcall/rollcall/protocol"
)

// Benchmarks. Run them with:
//
//	go test -run '^$' -bench . -benchmem -count 5 ./node
//
// BenchmarkIdleSessionMemory needs about 10,100 file descriptors in the
// node's process (the clients run in a child process); Go raises the soft
// RLIMIT_NOFILE to the hard limit itself, so `ulimit -Hn` must allow it.

// BenchmarkHeartbeat is the hot path: one plain heartbeat line handled on
// an active connection (what the reader goroutine does per line after
// reading it).
func BenchmarkHeartbeat(b *testing.B) {
	n := newBenchNode(b)
	c := &conn{n: n}
	c.state.Store(stateActive)
	line := []byte(`{"op":"hb"}`)
	b.ReportAllocs()
	for b.Loop() {
		c.handleLine(line)
	}
}

// BenchmarkHeartbeatParallel heartbeats many connections from all cores at
// once: there is no shared lock on the path, so it scales.
func BenchmarkHeartbeatParallel(b *testing.B) {
	n := newBenchNode(b)
	line := []byte(`{"op":"hb"}`)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		c := &conn{n: n}
		c.state.Store(stateActive)
		for pb.Next() {
			c.handleLine(line)
		}
	})
}

// BenchmarkHeartbeatTCP measures heartbeats end to end over a loopback TCP
// connection: the client writes b.N heartbeats and one with an id, and
// waits for its reply. It includes the read syscalls and line framing.
func BenchmarkHeartbeatTCP(b *testing.B) {
	n := newBenchNode(b)
	nc, err := net.Dial("tcp", n.ClientAddr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	r := bufio.NewReader(nc)
	fmt.Fprintln(nc, `{"op":"hello","user":"bench","device":"d"}`)
	if _, err := r.ReadString('\n'); err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriterSize(nc, 64<<10)
	hb := []byte("{\"op\":\"hb\"}\n")
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		w.Write(hb)
	}
	w.WriteString("{\"op\":\"hb\",\"id\":1}\n")
	w.Flush()
	if line, err := r.ReadString('\n'); err != nil || !strings.Contains(line, `"op":"hb"`) {
		b.Fatalf("%q %v", line, err)
	}
}

// BenchmarkDecodeRequest is the general (non-heartbeat) request decoder.
func BenchmarkDecodeRequest(b *testing.B) {
	line := []byte(`{"op":"status","status":"busy","id":17}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decodeRequest(line); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStatusChangeFanout is one status change (a crdt write) followed
// by its event reaching 100 subscribers over TCP.
func BenchmarkStatusChangeFanout(b *testing.B) {
	const subs = 100
	n := newBenchNode(b, func(c *Config) { c.EventCoalesce = -1 })
	a, _ := connect(b, n, "alice", "phone")
	watchers := make([]*client, subs)
	for i := range watchers {
		watchers[i], _ = connect(b, n, "w"+strconv.Itoa(i), "d")
		watchers[i].ok(map[string]any{"op": "sub", "users": []string{"alice"}})
		watchers[i].expectEvent("alice")
	}
	statuses := []string{`{"op":"status","status":"away"}`, `{"op":"status","status":"available"}`}
	b.ResetTimer()
	for i := range b.N {
		a.sendRaw(statuses[i%2])
		var wg sync.WaitGroup
		for _, w := range watchers {
			wg.Go(func() {
				line, err := w.r.ReadLine()
				if err != nil || !strings.Contains(string(line), `"op":"event"`) {
					b.Errorf("%q %v", line, err)
				}
			})
		}
		wg.Wait()
	}
}

// BenchmarkIdleSessionMemory connects 10,000 real TCP clients (from a child
// process), each with a session, and reports the node's memory per idle
// session: Go heap plus goroutine stacks (kernel socket buffers are not
// counted).
func BenchmarkIdleSessionMemory(b *testing.B) {
	const sessions = 10_000
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur < sessions+200 {
		b.Skipf("need %d file descriptors, have %d (raise ulimit -n)", sessions+200, lim.Cur)
	}
	for range b.N {
		n := newBenchNode(b, func(c *Config) { c.Timeout = time.Hour; c.Heartbeat = time.Minute })
		before := memInUse()
		cmd := exec.Command(os.Args[0], "-test.run=^TestIdleClientsHelper$", "-test.v")
		cmd.Env = append(os.Environ(), "ROLLCALL_IDLE_CLIENTS="+n.ClientAddr().String()+","+strconv.Itoa(sessions))
		stdin, _ := cmd.StdinPipe()
		stdout, _ := cmd.StdoutPipe()
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		sc := bufio.NewScanner(stdout)
		ready := false
		for sc.Scan() {
			if sc.Text() == "ready" {
				ready = true
				break
			}
		}
		if !ready {
			cmd.Wait()
			b.Fatal("client process failed")
		}
		if got := n.SessionCount(); got != sessions {
			b.Fatalf("sessions %d", got)
		}
		after := memInUse()
		b.ReportMetric(float64(after.heap-before.heap)/sessions, "heap-B/session")
		b.ReportMetric(float64(after.stack-before.stack)/sessions, "stack-B/session")
		b.ReportMetric(float64(after.heap+after.stack-before.heap-before.stack)/sessions, "B/session")
		stdin.Close()
		go io.Copy(io.Discard, stdout)
		cmd.Wait()
		n.Close()
	}
}

// TestIdleClientsHelper is BenchmarkIdleSessionMemory's child process: it
// connects the clients, prints "ready" and holds them until stdin closes.
func TestIdleClientsHelper(t *testing.T) {
	spec := os.Getenv("ROLLCALL_IDLE_CLIENTS")
	if spec == "" {
		t.Skip("helper process for BenchmarkIdleSessionMemory")
	}
	addr, count, _ := strings.Cut(spec, ",")
	total, _ := strconv.Atoi(count)
	conns := make([]net.Conn, 0, total)
	for i := range total {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(nc, `{"op":"hello","user":"u%d","device":"d","groups":["g%d"]}`+"\n", i, i%100)
		conns = append(conns, nc)
	}
	buf := make([]byte, 4096)
	for _, nc := range conns {
		nc.SetReadDeadline(time.Now().Add(time.Minute))
		if _, err := nc.Read(buf); err != nil { // the welcome
			t.Fatal(err)
		}
	}
	fmt.Println("ready")
	io.Copy(io.Discard, os.Stdin)
	for _, nc := range conns {
		nc.Close()
	}
}

type mem struct{ heap, stack uint64 }

func memInUse() mem {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return mem{heap: ms.HeapInuse, stack: ms.StackInuse}
}

func newBenchNode(b *testing.B, mut ...func(*Config)) *Node {
	return newTestNode(b, func(c *Config) {
		c.Logger = zap.NewNop()
		// A request rate that never bites: the benchmarks pipeline far more
		// requests on one connection than any client may, and measure what
		// the limit's bucket costs.
		c.RequestRate = 1e9
		for _, m := range mut {
			m(c)
		}
	})
}

// BenchmarkHeartbeatConns heartbeats as real clients do: conns TCP
// connections to the node, from a child process (this test binary again,
// TestHeartbeatClientsHelper), each with a session; in each round every
// connection sends one plain heartbeat, and the round ends when the node
// has counted all of them. So each heartbeat is one read the node's reader
// goroutine wakes for, as at the default 5s interval, not one of a
// pipelined batch (BenchmarkHeartbeatTCP). ns/op is wall time per
// heartbeat; cpu-ns/heartbeat is this process's CPU time (user and
// system) per heartbeat: the node's server path, plus the end-of-round
// checks (Node.Metrics, a few per round); allocs/op are this process's
// too. The clients' CPU (on loopback, their writes also carry each segment
// to the node's socket) is the child's, not counted.
func BenchmarkHeartbeatConns(b *testing.B) {
	for _, conns := range []int{100, 1000, 5000} {
		b.Run(strconv.Itoa(conns), func(b *testing.B) {
			n := newBenchNode(b, func(c *Config) { c.Timeout = time.Hour; c.Heartbeat = time.Minute })
			cmd := exec.Command(os.Args[0], "-test.run=^TestHeartbeatClientsHelper$")
			cmd.Env = append(os.Environ(), "ROLLCALL_HB_CLIENTS="+n.ClientAddr().String()+","+strconv.Itoa(conns))
			stdin, _ := cmd.StdinPipe()
			stdout, _ := cmd.StdoutPipe()
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			defer func() {
				stdin.Close()
				io.Copy(io.Discard, stdout) //nolint:errcheck // until the helper exits
				cmd.Wait()                  //nolint:errcheck // its failures are on stderr
			}()
			r := bufio.NewReader(stdout)
			if line, err := r.ReadString('\n'); err != nil || line != "ready\n" {
				b.Fatalf("client process: %q %v", line, err)
			}
			seen := func() uint64 { return n.Metrics().Requests[protocol.OpHB] }
			base := seen()
			var sent uint64
			b.ReportAllocs()
			cpu0 := cpuTime(b)
			b.ResetTimer()
			for sent < uint64(b.N) {
				round := min(uint64(conns), uint64(b.N)-sent)
				if _, err := fmt.Fprintln(stdin, round); err != nil {
					b.Fatal(err)
				}
				sent += round
				for seen()-base < sent {
					time.Sleep(50 * time.Microsecond) // each look walks every connection
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/heartbeat")
		})
	}
}

// TestHeartbeatClientsHelper is BenchmarkHeartbeatConns's child process: it
// connects the clients, prints "ready", and for each number k read from
// stdin sends one plain heartbeat on each of the first k connections.
func TestHeartbeatClientsHelper(t *testing.T) {
	spec := os.Getenv("ROLLCALL_HB_CLIENTS")
	if spec == "" {
		t.Skip("helper process for BenchmarkHeartbeatConns")
	}
	addr, count, _ := strings.Cut(spec, ",")
	total, _ := strconv.Atoi(count)
	conns := make([]net.Conn, 0, total)
	buf := make([]byte, 4096)
	for i := range total {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(nc, `{"op":"hello","user":"u%d","device":"d"}`+"\n", i)
		nc.SetReadDeadline(time.Now().Add(time.Minute))
		if _, err := nc.Read(buf); err != nil { // the welcome
			t.Fatal(err)
		}
		conns = append(conns, nc)
	}
	fmt.Println("ready")
	hb := []byte("{\"op\":\"hb\"}\n")
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		k, _ := strconv.Atoi(sc.Text())
		for _, nc := range conns[:min(k, len(conns))] {
			if _, err := nc.Write(hb); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, nc := range conns {
		nc.Close()
	}
}

// cpuTime returns the process's CPU time so far (user and system), in
// nanoseconds.
func cpuTime(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
