package main

// The node role: one real gossip node over a ReplicaHost, reporting one
// JSON line of stats every 200 ms on stdout and obeying commands on stdin.

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/gossip"
)

// nodeGCPercent is the collector's default target in a node process: a
// cycle every 10% of heap growth, so the live-heap metric (updated at each
// cycle's end) follows the heap closely.
const nodeGCPercent = 10

// statsInterval is how often a node prints its stats line.
const statsInterval = 200 * time.Millisecond

// sampleInterval is how often a node reads its live heap for the peak.
const sampleInterval = 5 * time.Millisecond

// nodeStats is a node's stats line.
type nodeStats struct {
	Name    string `json:"name"`
	Addr    string `json:"addr"`
	Seq     uint64 `json:"seq"`      // commands handled so far: a line with Seq >= n follows the n-th command
	Ready   bool   `json:"ready"`    // the Ready channel is closed
	ReadyMS int64  `json:"ready_ms"` // from gossip.New to Ready, when ready
	Why     string `json:"why,omitempty"`

	Held         int  `json:"held"`          // session records, tombstones included
	Remote       int  `json:"remote"`        // session records of other gateways
	HeldAtReady  int  `json:"held_at_ready"` // records held when Ready closed
	Partitioned  bool `json:"partitioned"`
	WritesQueued int  `json:"writes_queued"` // session writes asked for and not made yet

	HeapLive    uint64 `json:"heap_live"`    // /gc/heap/live:bytes
	HeapObjects uint64 `json:"heap_objects"` // /memory/classes/heap/objects:bytes
	HeapBase    uint64 `json:"heap_base"`    // live heap after the last mark's collection
	HeapPeak    uint64 `json:"heap_peak"`    // highest live heap sampled since the last mark

	SyncRecordsSent     uint64 `json:"sync_records_sent"`
	SyncBytesSent       uint64 `json:"sync_bytes_sent"`
	SyncRecordsReceived uint64 `json:"sync_records_received"`
	SyncBytesReceived   uint64 `json:"sync_bytes_received"`
	SyncPagesSent       uint64 `json:"sync_pages_sent"`
	SyncPagesReceived   uint64 `json:"sync_pages_received"`
	SendErrors          uint64 `json:"send_errors"`
	AnswersDropped      uint64 `json:"answers_dropped"`
}

// nodeFlags are a node process's flags.
type nodeFlags struct {
	name        string
	incarnation uint64
	bind        string
	join        string
	profile     string
	sessions    int // local sessions written before the cluster starts
	base        int // the first user index of this node's sessions
	gcPercent   int
}

// node is the running node role.
type node struct {
	f      nodeFlags
	host   *gossip.ReplicaHost
	c      *gossip.Cluster
	fault  *gossip.FaultNetwork
	start  time.Time // just before gossip.New
	out    io.Writer // stats lines
	errOut io.Writer // errors and the cluster's log

	mu          sync.Mutex // guards the fields below and writes to out
	seq         uint64
	readyMS     int64
	heldAtReady int
	partitioned bool
	queued      int
	heapBase    uint64
	heapPeak    uint64
}

func runNode(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("scale -role node", flag.ContinueOnError)
	var f nodeFlags
	fs.StringVar(&f.name, "name", "", "node name")
	fs.Uint64Var(&f.incarnation, "incarnation", uint64(time.Now().UnixNano()), "incarnation")
	fs.StringVar(&f.bind, "bind", "127.0.0.1:0", "gossip address")
	fs.StringVar(&f.join, "join", "", "a member's gossip address (empty: the first node)")
	fs.StringVar(&f.profile, "profile", "local", "memberlist profile")
	fs.IntVar(&f.sessions, "sessions", 0, "local sessions written before the cluster starts")
	fs.IntVar(&f.base, "base", 0, "first user index of the local sessions")
	fs.IntVar(&f.gcPercent, "gcpercent", nodeGCPercent, "debug.SetGCPercent")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if f.name == "" {
		return errors.New("node: -name is required")
	}
	debug.SetGCPercent(f.gcPercent)
	h, err := gossip.NewReplicaHost(crdt.Origin{Node: f.name, Incarnation: f.incarnation}, nil)
	if err != nil {
		return fmt.Errorf("node %s: %w", f.name, err)
	}
	n := &node{f: f, host: h, fault: gossip.NewFaultNetwork(f.incarnation), out: stdout, errOut: stderr}
	if err := n.writeNow(f.base, f.sessions); err != nil {
		return err
	}
	runtime.GC()
	n.heapBase = readHeap().live
	n.heapPeak = n.heapBase

	cfg := gossip.DefaultConfig()
	cfg.Name, cfg.Incarnation = f.name, f.incarnation
	cfg.BindAddr = f.bind
	cfg.Profile = f.profile
	if f.join != "" {
		cfg.Join = []string{f.join}
	}
	cfg.WrapTransport = n.fault.Wrap
	cfg.Logger = zap.New(zapcore.NewCore(zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig()),
		zapcore.AddSync(stderr), zap.WarnLevel)).Named(f.name)
	n.start = time.Now()
	c, err := gossip.New(cfg, h)
	if err != nil {
		return fmt.Errorf("node %s: %w", f.name, err)
	}
	n.c = c
	go n.watchReady()
	done := make(chan struct{})
	go n.sample(done)
	go n.report(done)
	err = n.commands(stdin)
	close(done)
	if lerr := c.Leave(2 * time.Second); lerr != nil && err == nil {
		err = fmt.Errorf("node %s: leave: %w", f.name, lerr)
	}
	if serr := c.Shutdown(); serr != nil && err == nil {
		err = fmt.Errorf("node %s: shutdown: %w", f.name, serr)
	}
	return err
}

// session is the i-th session of the harness: one device of user i, active,
// in one of 1,000 groups.
func session(i int) crdt.Session {
	u := "u" + strconv.Itoa(i)
	return crdt.Session{User: u, Device: "d", ID: u + "-1", Epoch: 1,
		State: crdt.StateActive, Status: crdt.StatusAvailable, Groups: []string{"g" + strconv.Itoa(i%1000)}}
}

// writeNow writes k new local sessions, users first.., without publishing
// them (before the cluster exists).
func (n *node) writeNow(first, k int) error {
	for i := first; i < first+k; i++ {
		if _, err := n.host.Put(session(i)); err != nil {
			return fmt.Errorf("node %s: write: %w", n.f.name, err)
		}
	}
	return nil
}

// writeOver writes k new sessions, users first.., spread evenly over d,
// and publishes them.
func (n *node) writeOver(first, k int, d time.Duration) {
	const tick = 50 * time.Millisecond
	steps := max(int(d/tick), 1)
	t := time.NewTicker(tick)
	defer t.Stop()
	for s := range steps {
		want := k*(s+1)/steps - k*s/steps
		ds := make([]crdt.Delta, 0, want)
		for range want {
			d, err := n.host.Put(session(first))
			first++
			if err != nil {
				fmt.Fprintf(n.errOut, "node %s: write: %v\n", n.f.name, err)
				continue
			}
			ds = append(ds, d)
		}
		n.c.Publish(ds)
		n.mu.Lock()
		n.queued -= want
		n.mu.Unlock()
		if s < steps-1 {
			<-t.C
		}
	}
}

func (n *node) watchReady() {
	<-n.c.Ready()
	var held int
	n.host.Do(func(r *crdt.Replica) { held, _ = census(r) })
	n.mu.Lock()
	n.readyMS = time.Since(n.start).Milliseconds()
	n.heldAtReady = held
	n.mu.Unlock()
}

// census returns the session records r holds and those of other gateways.
func census(r *crdt.Replica) (held, remote int) {
	c := r.Census()
	for st := range crdt.NumStates {
		held += c.Local[st] + c.Remote[st]
		remote += c.Remote[st]
	}
	return held, remote
}

type heapReading struct{ live, objects uint64 }

func readHeap() heapReading {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	var h heapReading
	if s[0].Value.Kind() == metrics.KindUint64 {
		h.live = s[0].Value.Uint64()
	}
	if s[1].Value.Kind() == metrics.KindUint64 {
		h.objects = s[1].Value.Uint64()
	}
	return h
}

// sample keeps the peak live heap since the last mark.
func (n *node) sample(done <-chan struct{}) {
	t := time.NewTicker(sampleInterval)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		live := readHeap().live
		n.mu.Lock()
		n.heapPeak = max(n.heapPeak, live)
		n.mu.Unlock()
	}
}

func (n *node) report(done <-chan struct{}) {
	t := time.NewTicker(statsInterval)
	defer t.Stop()
	for {
		n.print()
		select {
		case <-done:
			return
		case <-t.C:
		}
	}
}

// print writes one stats line.
func (n *node) print() {
	var held, remote int
	n.host.Do(func(r *crdt.Replica) { held, remote = census(r) })
	ready, why := n.c.Readiness()
	st := n.c.Stats()
	pagesSent, pagesReceived, bytesReceived := syncTraffic(st)
	hr := readHeap()
	n.mu.Lock()
	defer n.mu.Unlock()
	n.heapPeak = max(n.heapPeak, hr.live)
	line := nodeStats{
		Name: n.f.name, Addr: n.c.LocalAddr(), Seq: n.seq, Ready: ready, ReadyMS: n.readyMS, Why: why,
		Held: held, Remote: remote, HeldAtReady: n.heldAtReady, Partitioned: n.partitioned, WritesQueued: n.queued,
		HeapLive: hr.live, HeapObjects: hr.objects, HeapBase: n.heapBase, HeapPeak: n.heapPeak,
		SyncRecordsSent: st.SyncRecordsSent.Load(), SyncBytesSent: st.SyncBytesSent.Load(),
		SyncRecordsReceived: st.SyncRecordsReceived.Load(), SyncBytesReceived: bytesReceived,
		SyncPagesSent: pagesSent, SyncPagesReceived: pagesReceived,
		SendErrors: st.SendErrors.Load(), AnswersDropped: st.AnswersDropped.Load(),
	}
	b, err := json.Marshal(line)
	if err != nil {
		fmt.Fprintf(n.errOut, "node %s: stats: %v\n", n.f.name, err)
		return
	}
	_, _ = n.out.Write(append(b, '\n'))
}

// syncTraffic returns the pages of anti-entropy answers this node sent and
// received, and the bytes of the answers received.
func syncTraffic(st *gossip.Stats) (pagesSent, pagesReceived, bytesReceived uint64) {
	for _, t := range st.Received() {
		if t.Type == "sync" || t.Type == "sync-page" {
			bytesReceived += t.Bytes
		}
	}
	return st.SyncPagesSent.Load(), st.SyncPagesReceived.Load(), bytesReceived
}

// commands obeys stdin until "quit" or its end.
func (n *node) commands(stdin io.Reader) error {
	sc := bufio.NewScanner(stdin)
	for sc.Scan() {
		cmd, err := parseCommand(sc.Text())
		if err != nil {
			fmt.Fprintf(n.errOut, "node %s: %v\n", n.f.name, err)
			continue
		}
		if cmd.op == opQuit {
			return nil
		}
		n.do(cmd)
		n.mu.Lock()
		n.seq++
		n.mu.Unlock()
		n.print()
	}
	return sc.Err()
}

func (n *node) do(cmd command) {
	switch cmd.op {
	case opWrite:
		n.mu.Lock()
		n.queued += cmd.count
		n.mu.Unlock()
		go n.writeOver(cmd.first, cmd.count, cmd.over)
	case opGC:
		runtime.GC()
	case opMark:
		runtime.GC()
		live := readHeap().live
		n.mu.Lock()
		n.heapBase, n.heapPeak = live, live
		n.mu.Unlock()
	case opPartition:
		self := n.c.LocalAddr()
		peers := cmd.peers
		if cmd.all {
			peers = nil
			for _, m := range n.c.Members() {
				if !m.Self {
					peers = append(peers, m.Addr)
				}
			}
		}
		for _, p := range peers {
			n.fault.Block(self, p)
		}
		n.mu.Lock()
		n.partitioned = true
		n.mu.Unlock()
	case opHeal:
		n.fault.Heal()
		n.mu.Lock()
		n.partitioned = false
		n.mu.Unlock()
	}
}

// op is a node command.
type op int

const (
	opQuit      op = iota + 1
	opWrite        // write N D FIRST: N new sessions, users FIRST.., spread over D
	opGC           // gc: collect now
	opMark         // mark: collect, then take the live heap as the baseline of the next peak
	opPartition    // partition on all | partition on ADDR[,ADDR...]
	opHeal         // partition off
)

// command is one parsed stdin line.
type command struct {
	op    op
	count int
	first int
	over  time.Duration
	all   bool
	peers []string
}

// parseCommand parses one command line.
func parseCommand(line string) (command, error) {
	f := strings.Fields(line)
	if len(f) == 0 {
		return command{}, errors.New("empty command")
	}
	switch {
	case f[0] == "quit" && len(f) == 1:
		return command{op: opQuit}, nil
	case f[0] == "gc" && len(f) == 1:
		return command{op: opGC}, nil
	case f[0] == "mark" && len(f) == 1:
		return command{op: opMark}, nil
	case f[0] == "write" && len(f) == 4:
		k, err := strconv.Atoi(f[1])
		if err != nil || k < 0 {
			return command{}, fmt.Errorf("write: bad count %q", f[1])
		}
		d, err := time.ParseDuration(f[2])
		if err != nil || d < 0 {
			return command{}, fmt.Errorf("write: bad duration %q", f[2])
		}
		first, err := strconv.Atoi(f[3])
		if err != nil || first < 0 {
			return command{}, fmt.Errorf("write: bad first user %q", f[3])
		}
		return command{op: opWrite, count: k, over: d, first: first}, nil
	case f[0] == "partition" && len(f) == 2 && f[1] == "off":
		return command{op: opHeal}, nil
	case f[0] == "partition" && len(f) == 3 && f[1] == "on":
		if f[2] == "all" {
			return command{op: opPartition, all: true}, nil
		}
		return command{op: opPartition, peers: strings.Split(f[2], ",")}, nil
	}
	return command{}, fmt.Errorf("unknown command %q", line)
}
