package main

// The harness: starts the node processes, drives the scenarios, prints the
// tables and verdicts.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The targets the verdicts check.
const (
	targetReady        = 30 * time.Second // a joiner holds every session within this
	targetSenderExtra  = 64 << 20         // peak extra live heap on a sender during a transfer
	targetHeapPerRemot = 256              // live heap bytes per remote session on the joiner
)

// profile is the memberlist profile every node uses.
const profile = "local"

// settle is how long after the first reading of the observed node's heap
// the second is taken.
const settle = 3 * time.Second

// pollInterval is how often the harness looks at the nodes' latest stats.
const pollInterval = 50 * time.Millisecond

type config struct {
	sessions        int
	nodes           int
	timeout         time.Duration
	scenarios       []string
	partition       time.Duration
	partitionWrites int
	budget          time.Duration
	gcPercent       int
}

func parseFlags(args []string) (config, error) {
	fs := flag.NewFlagSet("scale", flag.ContinueOnError)
	var c config
	var scen string
	fs.IntVar(&c.sessions, "sessions", 1_000_000, "sessions the senders hold between them")
	fs.IntVar(&c.nodes, "nodes", 3, "sender nodes")
	fs.DurationVar(&c.timeout, "timeout", 120*time.Second, "per scenario (and for the senders to converge)")
	fs.StringVar(&scen, "scenarios", "joiner,restart,partition", "scenarios to run, in order")
	fs.DurationVar(&c.partition, "partition", 30*time.Second, "how long the partition scenario's partition lasts")
	fs.IntVar(&c.partitionWrites, "partition-writes", 30_000, "new sessions the senders write during the partition, between them")
	fs.DurationVar(&c.budget, "budget", 9*time.Minute, "the whole run's time: the waits shrink below -timeout to fit it")
	fs.IntVar(&c.gcPercent, "gcpercent", nodeGCPercent, "the nodes' debug.SetGCPercent")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if c.sessions < 1 || c.nodes < 1 || c.timeout <= 0 || c.partition <= 0 || c.budget <= 0 || c.partitionWrites < 0 || c.gcPercent < 1 {
		return c, errors.New("-sessions, -nodes, -timeout, -partition, -budget and -gcpercent must be positive, -partition-writes not negative")
	}
	var err error
	if c.scenarios, err = parseScenarios(scen); err != nil {
		return c, err
	}
	return c, nil
}

// parseScenarios parses -scenarios: a comma-separated list of known names.
func parseScenarios(s string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		switch f {
		case "joiner", "restart", "partition":
			out = append(out, f)
		case "":
		default:
			return nil, fmt.Errorf("unknown scenario %q (want joiner, restart, partition)", f)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no scenario given")
	}
	return out, nil
}

// proc is one node process.
type proc struct {
	name  string
	bind  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	sent  uint64 // commands sent
	done  chan struct{}

	mu   sync.Mutex
	last nodeStats
	seen bool // a stats line arrived
	err  error
}

func (p *proc) stats() (nodeStats, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last, p.seen
}

func (p *proc) exited() error {
	select {
	case <-p.done:
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.err != nil {
			return fmt.Errorf("node %s exited: %w", p.name, p.err)
		}
		return fmt.Errorf("node %s exited", p.name)
	default:
		return nil
	}
}

// send writes a command; the returned number is the Seq a stats line
// carries once the command was handled.
func (p *proc) send(line string) (uint64, error) {
	if _, err := io.WriteString(p.stdin, line+"\n"); err != nil {
		return 0, fmt.Errorf("node %s: %s: %w", p.name, line, err)
	}
	p.sent++
	return p.sent, nil
}

type harness struct {
	cfg    config
	exe    string
	dir    string // node logs
	out    io.Writer
	procs  []*proc
	total  int // sessions the senders should hold
	nextID int // next user index for sessions written during the run

	deadline time.Time // the end of the budget
	phases   []string  // the phases not done yet: "setup", then the scenarios
}

// phaseOverhead is what a phase takes besides its wait: starting or
// stopping a node, the collections and the settle.
const phaseOverhead = 10 * time.Second

// timeout returns how long the current phase (h.phases[0]) may wait: the
// -timeout, or less so that the phases left fit the budget, each getting an
// equal share of what the budget has left beyond their fixed durations (the
// partition's). Never below 5 s.
func (h *harness) timeout() time.Duration {
	left := time.Until(h.deadline)
	for _, ph := range h.phases {
		left -= phaseOverhead
		if ph == "partition" {
			left -= h.cfg.partition + writesGrace
		}
	}
	return max(min(h.cfg.timeout, left/time.Duration(max(len(h.phases), 1))), 5*time.Second)
}

// writesGrace is how long after the partition's end its writes may take to
// finish before the heal goes ahead anyway.
const writesGrace = 10 * time.Second

// done ends the current phase.
func (h *harness) done() {
	if len(h.phases) > 0 {
		h.phases = h.phases[1:]
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	cfg, err := parseFlags(args)
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("own executable: %w", err)
	}
	dir, err := os.MkdirTemp("", "rollcall-scale-")
	if err != nil {
		return fmt.Errorf("log directory: %w", err)
	}
	h := &harness{cfg: cfg, exe: exe, dir: dir, out: out, total: cfg.sessions, nextID: cfg.sessions,
		deadline: time.Now().Add(cfg.budget), phases: append([]string{"setup"}, cfg.scenarios...)}
	defer h.stopAll()
	h.header()
	senders, err := h.setup(ctx)
	if err != nil {
		return err
	}
	h.done()
	var results []result
	var joiner *proc
	for _, sc := range cfg.scenarios {
		var r result
		switch sc {
		case "joiner":
			joiner, r, err = h.joiner(ctx, senders, joiner)
		case "restart":
			joiner, r, err = h.restart(ctx, senders, joiner)
		case "partition":
			joiner, r, err = h.partition(ctx, senders, joiner)
		}
		if err != nil {
			return fmt.Errorf("scenario %s: %w", sc, err)
		}
		h.done()
		fmt.Fprint(out, r.table())
		results = append(results, r)
	}
	fmt.Fprint(out, verdicts(results))
	return nil
}

func (h *harness) header() {
	fmt.Fprintf(h.out, "rollcall scale: %d sessions on %d sender nodes (one device per user, one group of 1,000 each), one observed node\n",
		h.cfg.sessions, h.cfg.nodes)
	fmt.Fprintf(h.out, "each node a process: gossip.New over gossip.ReplicaHost, memberlist profile %q on 127.0.0.1, stats every %v\n",
		profile, statsInterval)
	fmt.Fprintf(h.out, "nodes run with debug.SetGCPercent(%d): a collection every %d%% of heap growth, so /gc/heap/live:bytes (sampled every %v for the peak) follows the heap\n",
		h.cfg.gcPercent, h.cfg.gcPercent, sampleInterval)
	fmt.Fprintf(h.out, "timeout %v per scenario, less when the %v budget requires; node logs in %s\n\n", h.cfg.timeout, h.cfg.budget, h.dir)
}

// start launches a node process and waits for its first stats line.
func (h *harness) start(ctx context.Context, name, bind, join string, sessions, base int) (*proc, error) {
	if bind == "" {
		bind = "127.0.0.1:0"
	}
	args := []string{"-role", "node", "-name", name, "-bind", bind, "-profile", profile,
		"-incarnation", strconv.FormatInt(time.Now().UnixNano(), 10), "-gcpercent", strconv.Itoa(h.cfg.gcPercent),
		"-sessions", strconv.Itoa(sessions), "-base", strconv.Itoa(base)}
	if join != "" {
		args = append(args, "-join", join)
	}
	logf, err := os.OpenFile(filepath.Join(h.dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("node %s log: %w", name, err)
	}
	cmd := exec.Command(h.exe, args...)
	cmd.Stderr = logf
	stdin, err := cmd.StdinPipe()
	if err != nil {
		logf.Close()
		return nil, fmt.Errorf("node %s: %w", name, err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return nil, fmt.Errorf("node %s: %w", name, err)
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("node %s: start: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, stdin: stdin, done: make(chan struct{})}
	h.procs = append(h.procs, p)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var st nodeStats
			if err := json.Unmarshal(sc.Bytes(), &st); err != nil {
				continue
			}
			p.mu.Lock()
			p.last, p.seen = st, true
			p.mu.Unlock()
		}
		err := cmd.Wait()
		logf.Close()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(p.done)
	}()
	err = h.wait(ctx, time.Now().Add(h.cfg.timeout), []*proc{p}, func() bool { _, ok := p.stats(); return ok })
	if err != nil {
		return nil, fmt.Errorf("node %s: no stats: %w", name, err)
	}
	st, _ := p.stats()
	p.bind = st.Addr
	return p, nil
}

// errTimeout is wait's error when the deadline passed.
var errTimeout = errors.New("timed out")

// wait polls cond until it holds, the deadline passes (errTimeout), ctx
// ends or one of ps exits.
func (h *harness) wait(ctx context.Context, deadline time.Time, ps []*proc, cond func() bool) error {
	for {
		if cond() {
			return nil
		}
		for _, p := range ps {
			if err := p.exited(); err != nil {
				return err
			}
		}
		if !time.Now().Before(deadline) {
			return errTimeout
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pollInterval):
		}
	}
}

// command sends line to every p and waits until each has handled it.
func (h *harness) command(ctx context.Context, line string, ps ...*proc) error {
	want := make([]uint64, len(ps))
	for i, p := range ps {
		n, err := p.send(line)
		if err != nil {
			return err
		}
		want[i] = n
	}
	return h.wait(ctx, time.Now().Add(h.cfg.timeout), ps, func() bool {
		for i, p := range ps {
			if st, _ := p.stats(); st.Seq < want[i] {
				return false
			}
		}
		return true
	})
}

// stop asks p to leave and waits for it to exit, killing it after 10 s.
func (h *harness) stop(p *proc) {
	_, _ = p.send("quit")
	_ = p.stdin.Close()
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func (h *harness) stopAll() {
	var wg sync.WaitGroup
	for _, p := range h.procs {
		select {
		case <-p.done:
			continue
		default:
		}
		wg.Add(1)
		go func() { defer wg.Done(); h.stop(p) }()
	}
	wg.Wait()
}

// setup starts the senders, each with its share of the sessions, and waits
// until every one holds them all.
func (h *harness) setup(ctx context.Context) ([]*proc, error) {
	t0 := time.Now()
	share := func(i int) (n, base int) {
		base = h.cfg.sessions * i / h.cfg.nodes
		return h.cfg.sessions*(i+1)/h.cfg.nodes - base, base
	}
	n, base := share(0)
	first, err := h.start(ctx, "s1", "", "", n, base)
	if err != nil {
		return nil, err
	}
	senders := []*proc{first}
	type started struct {
		i   int
		p   *proc
		err error
	}
	ch := make(chan started)
	for i := 1; i < h.cfg.nodes; i++ {
		n, base := share(i)
		go func() {
			p, err := h.start(ctx, "s"+strconv.Itoa(i+1), "", first.bind, n, base)
			ch <- started{i, p, err}
		}()
	}
	rest := make([]*proc, h.cfg.nodes)
	for range h.cfg.nodes - 1 {
		s := <-ch
		if s.err != nil {
			err = errors.Join(err, s.err)
		}
		rest[s.i] = s.p
	}
	if err != nil {
		return nil, err
	}
	senders = append(senders, rest[1:]...)
	written := time.Since(t0)
	timeout := h.timeout()
	err = h.wait(ctx, time.Now().Add(timeout), senders, func() bool {
		for _, p := range senders {
			if st, _ := p.stats(); st.Held < h.total || !st.Ready {
				return false
			}
		}
		return true
	})
	if err != nil && !errors.Is(err, errTimeout) {
		return nil, err
	}
	var held []string
	for _, p := range senders {
		st, _ := p.stats()
		held = append(held, fmt.Sprintf("%s %d (ready %v, %s live heap)", p.name, st.Held, st.Ready, fmtBytes(st.HeapLive)))
	}
	state := "converged after " + fmtDur(time.Since(t0)-written)
	if err != nil {
		state = "NOT converged within " + fmtDur(timeout)
	}
	fmt.Fprintf(h.out, "senders started and seeded in %v, %s: %s\n\n", fmtDur(written), state, strings.Join(held, "; "))
	return senders, nil
}

// result is one scenario's measurements.
type result struct {
	name       string
	about      string
	observed   string // the node measured
	target     int    // records the senders hold
	timeout    time.Duration
	timedOut   bool
	writesLeft int // partition: writes not made by the heal

	readyAfter   time.Duration // harness clock from the scenario's start (or heal); -1: not ready
	readyNode    time.Duration // node clock from gossip.New; -1: not ready or not applicable
	fullAfter    time.Duration // until the node held target records; -1: never
	heldAtReady  int
	heldAtReadyN bool // heldAtReady is meaningful
	held         int
	remote       int
	heldAtStart  int // partition: records held at the heal
	sendersMin   int
	sendersMax   int
	why          string

	syncRecordsSent, syncBytesSent, syncPagesSent     uint64 // senders, during the scenario
	syncRecordsRecv, syncBytesRecv, syncPagesRecv     uint64 // the node
	sendErrors, answersDropped                        uint64 // senders
	senderExtra                                       uint64 // max over senders of peak - base
	senderExtraName                                   string
	heapAfter                                         uint64 // node live heap after gc
	perRemote                                         float64
	heapSettled                                       uint64 // the same, settle later
	perRemoteSettled                                  float64
	checkReady, checkHeap, checkSender, partitionKind bool
}

// counters is a stats line's cumulative counters.
func counters(ps []*proc) []nodeStats {
	out := make([]nodeStats, len(ps))
	for i, p := range ps {
		out[i], _ = p.stats()
	}
	return out
}

// observe runs one transfer to node p: it waits until p is ready and holds
// target records (or the timeout), then collects the measurements.
func (h *harness) observe(ctx context.Context, r *result, senders []*proc, before []nodeStats, p *proc, t0 time.Time, nodeBefore nodeStats) error {
	r.target = h.total
	r.readyAfter, r.readyNode, r.fullAfter = -1, -1, -1
	r.timeout = h.timeout()
	deadline := t0.Add(r.timeout)
	err := h.wait(ctx, deadline, append([]*proc{p}, senders...), func() bool {
		st, ok := p.stats()
		if !ok {
			return false
		}
		if st.Ready && r.readyAfter < 0 {
			r.readyAfter = time.Since(t0)
		}
		if st.Held >= r.target && r.fullAfter < 0 {
			r.fullAfter = time.Since(t0)
		}
		return r.readyAfter >= 0 && r.fullAfter >= 0
	})
	if errors.Is(err, errTimeout) {
		r.timedOut = true
	} else if err != nil {
		return err
	}
	if err := h.command(ctx, "gc", p); err != nil {
		return err
	}
	st, _ := p.stats()
	if st.Ready && r.readyNode < 0 && st.ReadyMS > 0 && r.checkReady {
		r.readyNode = time.Duration(st.ReadyMS) * time.Millisecond
	}
	r.heldAtReady, r.heldAtReadyN = st.HeldAtReady, st.Ready && r.checkReady
	r.held, r.remote, r.why = st.Held, st.Remote, st.Why
	r.heapAfter = st.HeapLive
	if st.Remote > 0 {
		r.perRemote = float64(st.HeapLive) / float64(st.Remote)
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(settle):
	}
	if err := h.command(ctx, "gc", p); err != nil {
		return err
	}
	settled, _ := p.stats()
	r.heapSettled = settled.HeapLive
	if settled.Remote > 0 {
		r.perRemoteSettled = float64(settled.HeapLive) / float64(settled.Remote)
	}
	r.syncRecordsRecv = st.SyncRecordsReceived - nodeBefore.SyncRecordsReceived
	r.syncBytesRecv = st.SyncBytesReceived - nodeBefore.SyncBytesReceived
	r.syncPagesRecv = st.SyncPagesReceived - nodeBefore.SyncPagesReceived
	after := counters(senders)
	r.sendersMin, r.sendersMax = after[0].Held, after[0].Held
	for i, a := range after {
		b := before[i]
		r.sendersMin, r.sendersMax = min(r.sendersMin, a.Held), max(r.sendersMax, a.Held)
		r.syncRecordsSent += a.SyncRecordsSent - b.SyncRecordsSent
		r.syncBytesSent += a.SyncBytesSent - b.SyncBytesSent
		r.syncPagesSent += a.SyncPagesSent - b.SyncPagesSent
		r.sendErrors += a.SendErrors - b.SendErrors
		r.answersDropped += a.AnswersDropped - b.AnswersDropped
		if a.HeapPeak >= a.HeapBase && a.HeapPeak-a.HeapBase >= r.senderExtra {
			r.senderExtra, r.senderExtraName = a.HeapPeak-a.HeapBase, a.Name
		}
	}
	return nil
}

// joiner starts a node that joins the senders late, with no sessions.
func (h *harness) joiner(ctx context.Context, senders []*proc, old *proc) (*proc, result, error) {
	r := result{name: "joiner", about: "a late joiner with an empty replica joins the senders", observed: "j1",
		checkReady: true, checkHeap: true, checkSender: true}
	if old != nil {
		h.stop(old)
	}
	if err := h.command(ctx, "mark", senders...); err != nil {
		return nil, r, err
	}
	before := counters(senders)
	t0 := time.Now()
	p, err := h.start(ctx, "j1", "", senders[0].bind, 0, 0)
	if err != nil {
		return nil, r, err
	}
	return p, r, h.observe(ctx, &r, senders, before, p, t0, nodeStats{})
}

// restart stops the observed node and starts it again under the same name
// and address with a new incarnation and an empty replica.
func (h *harness) restart(ctx context.Context, senders []*proc, old *proc) (*proc, result, error) {
	r := result{name: "restart", about: "the observed node leaves and starts again: same name and address, new incarnation, empty replica",
		observed: "j1", checkReady: true, checkHeap: true, checkSender: true}
	bind := ""
	if old != nil {
		bind = old.bind
		h.stop(old)
	}
	if err := h.command(ctx, "mark", senders...); err != nil {
		return nil, r, err
	}
	before := counters(senders)
	t0 := time.Now()
	p, err := h.start(ctx, "j1", bind, senders[0].bind, 0, 0)
	if err != nil {
		return nil, r, err
	}
	return p, r, h.observe(ctx, &r, senders, before, p, t0, nodeStats{})
}

// partition cuts the observed node off the senders both ways while they
// write new sessions, heals, and measures the catch-up.
func (h *harness) partition(ctx context.Context, senders []*proc, p *proc) (*proc, result, error) {
	r := result{name: "partition", observed: "j1", checkHeap: true, checkSender: true, partitionKind: true,
		about: fmt.Sprintf("the observed node is cut off both ways for %v while the senders write %d new sessions; times from the heal",
			h.cfg.partition, h.cfg.partitionWrites)}
	if p == nil {
		var err error
		if p, err = h.start(ctx, "j1", "", senders[0].bind, 0, 0); err != nil {
			return nil, r, err
		}
		_ = h.wait(ctx, time.Now().Add(h.timeout()), []*proc{p}, func() bool { st, _ := p.stats(); return st.Ready })
	}
	if err := h.command(ctx, "mark", senders...); err != nil {
		return nil, r, err
	}
	before := counters(senders)
	nodeBefore, _ := p.stats()
	if err := h.command(ctx, "partition on all", p); err != nil {
		return nil, r, err
	}
	for _, s := range senders {
		if err := h.command(ctx, "partition on "+p.bind, s); err != nil {
			return nil, r, err
		}
	}
	for i, s := range senders {
		k := h.cfg.partitionWrites*(i+1)/len(senders) - h.cfg.partitionWrites*i/len(senders)
		if err := h.command(ctx, fmt.Sprintf("write %d %v %d", k, h.cfg.partition, h.nextID), s); err != nil {
			return nil, r, err
		}
		h.nextID += k
	}
	h.total += h.cfg.partitionWrites
	select {
	case <-ctx.Done():
		return nil, r, ctx.Err()
	case <-time.After(h.cfg.partition):
	}
	// The writes end with the partition, give or take a tick, unless the
	// senders are too busy to make them.
	queued := func() int {
		n := 0
		for _, s := range senders {
			st, _ := s.stats()
			n += st.WritesQueued
		}
		return n
	}
	err := h.wait(ctx, time.Now().Add(writesGrace), senders, func() bool { return queued() == 0 })
	if err != nil && !errors.Is(err, errTimeout) {
		return nil, r, fmt.Errorf("writes during the partition: %w", err)
	}
	r.writesLeft = queued()
	atHeal, _ := p.stats()
	r.heldAtStart = atHeal.Held
	t0 := time.Now()
	if err := h.command(ctx, "partition off", append([]*proc{p}, senders...)...); err != nil {
		return nil, r, err
	}
	return p, r, h.observe(ctx, &r, senders, before, p, t0, nodeBefore)
}
