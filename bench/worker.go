package bench

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/rollcall/rollcall/auth"
	"github.com/rollcall/rollcall/client"
)

// maxInFlight bounds a worker's status requests awaiting their reply.
const maxInFlight = 4096

// statuses is the cycle status changes go through: each change differs
// from the one before, so its event is recognisable.
var statuses = [...]string{"away", "busy", "available"}

// session is one generated session.
type session struct {
	g      int // global number
	user   string
	gw     int // index of its home gateway in Addrs
	st     wireState
	c      *client.Client
	role   role
	cycle  int         // index into statuses of its current status
	flight atomic.Bool // a status change is awaiting its reply
}

type role int

const (
	roleChanger role = iota
	roleSubscriber
	roleSilent
)

// pendingChange is the last status change sent for a user, awaiting its
// events.
type pendingChange struct {
	status string
	sent   int64        // ns since the worker's epoch
	seen   map[int]bool // subscribers that recorded it
}

type subUser struct {
	sub  int
	user string
}

// worker is one generator.
type worker struct {
	cfg   WorkerConfig
	log   *zap.Logger
	epoch time.Time
	out   *msgWriter

	heartbeats  atomic.Uint64
	changes     atomic.Uint64
	changeErrs  atomic.Uint64
	skipped     atomic.Uint64
	lost        atomic.Uint64
	measuring   atomic.Bool
	timeoutMS   atomic.Int64
	heartbeatMS atomic.Int64

	established, failed atomic.Int64

	mu          sync.Mutex
	pending     map[string]*pendingChange
	silentUsers map[string]*session
	offlineSeen map[string]bool
	onlineSeen  map[subUser]bool // a subscriber has seen a user online
	request     Histogram
	propagation Histogram
	offline     Histogram
	timeline    []Second
	start       time.Time
}

func (w *worker) now() int64 { return int64(time.Since(w.epoch)) }

// msgWriter writes protocol lines from several goroutines.
type msgWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (m *msgWriter) send(msg Msg) error {
	b, err := EncodeMsg(msg)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	_, err = m.w.Write(b)
	return err
}

// RunWorker runs one generator: it reads its configuration and commands
// from in and writes its reports to out, in the worker protocol. It
// returns when the run is over (after stop, or when in ends or ctx is
// done), every session closed. A failure is also reported on out as an
// error message.
func RunWorker(ctx context.Context, in io.Reader, out io.Writer, log *zap.Logger) error {
	if log == nil {
		log = zap.NewNop()
	}
	mw := &msgWriter{w: out}
	err := runWorker(ctx, in, mw, log)
	if err != nil {
		_ = mw.send(Msg{Type: MsgError, Error: err.Error()})
	}
	return err
}

func runWorker(ctx context.Context, in io.Reader, mw *msgWriter, log *zap.Logger) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmds := make(chan Msg, 4)
	readErr := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(in)
		sc.Buffer(make([]byte, 0, 64<<10), maxMsgBytes)
		for sc.Scan() {
			m, err := DecodeMsg(sc.Bytes())
			if err != nil {
				readErr <- err
				return
			}
			cmds <- m
		}
		if err := sc.Err(); err != nil {
			readErr <- fmt.Errorf("bench: worker input: %w", err)
			return
		}
		readErr <- io.EOF
	}()
	next := func(want string) error {
		select {
		case m := <-cmds:
			if m.Type != want {
				return fmt.Errorf("bench: worker expected %s, got %s", want, m.Type)
			}
			if want == MsgConfig {
				cmds <- m // handed back to the caller below
			}
			return nil
		case err := <-readErr:
			if errors.Is(err, io.EOF) {
				return fmt.Errorf("bench: worker input ended before %s", want)
			}
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := next(MsgConfig); err != nil {
		return err
	}
	cfg := *(<-cmds).Config
	priority := ""
	if cfg.Priority {
		priority = raisePriority()
	}
	w := &worker{cfg: cfg, log: log, epoch: time.Now(), out: mw, pending: map[string]*pendingChange{},
		silentUsers: map[string]*session{}, offlineSeen: map[string]bool{}, onlineSeen: map[subUser]bool{}}
	token, err := tokenFunc(cfg.SecretFile)
	if err != nil {
		return err
	}
	var tlsConf *tls.Config
	if cfg.TLS != nil {
		if tlsConf, err = cfg.TLS.Config(); err != nil {
			return fmt.Errorf("bench: tls: %w", err)
		}
	}
	if cfg.Transport == "tls" && tlsConf == nil {
		return errors.New("bench: transport tls needs TLS settings")
	}

	progressDone := make(chan struct{})
	go w.progressLoop(ctx, progressDone)
	defer close(progressDone)

	sessions := w.plan()
	defer w.closeAll(sessions)
	rep := w.connect(ctx, sessions, token, tlsConf)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	rep.TimeoutMS, rep.HeartbeatMS = w.timeoutMS.Load(), w.heartbeatMS.Load()
	if err := mw.send(Msg{Type: MsgConnected, Connected: rep}); err != nil {
		return err
	}
	if err := next(MsgStart); err != nil {
		return err
	}
	w.mu.Lock()
	w.start = time.Now()
	w.mu.Unlock()
	w.heartbeats.Store(0)
	w.measuring.Store(true)
	loadCtx, stopLoad := context.WithCancel(ctx)
	loadDone := make(chan struct{})
	go func() {
		defer close(loadDone)
		w.load(loadCtx, sessions)
	}()
	err = next(MsgStop)
	stopLoad()
	<-loadDone
	w.measuring.Store(false)
	if err != nil {
		return err
	}
	res := w.result(sessions)
	res.Priority = priority
	return mw.send(Msg{Type: MsgResult, Result: res})
}

// tokenFunc returns the token source of the sessions: HS256 tokens that
// may read every user, minted with the key in secretFile, or none.
func tokenFunc(secretFile string) (func(ctx context.Context, user string) (string, error), error) {
	if secretFile == "" {
		return nil, nil
	}
	secret, err := auth.ReadSecretFile(secretFile)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	signer, err := auth.NewSecretSigner(secret)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	return func(_ context.Context, user string) (string, error) {
		return signer.Sign(auth.TokenSpec{User: user, TTL: time.Hour, Grants: &auth.GrantsClaim{Read: []string{"*"}}}, time.Now())
	}, nil
}

// plan names the sessions and gives them roles: the first Subscribers are
// subscribers, the last Silent go silent during the window, the rest
// change status.
func (w *worker) plan() []*session {
	n := w.cfg.Sessions
	ss := make([]*session, n)
	for i := range n {
		g := w.cfg.Base + i
		s := &session{g: g, user: fmt.Sprintf("%s-%d", w.cfg.Run, g), gw: g % len(w.cfg.Addrs), cycle: len(statuses) - 1}
		switch {
		case i < w.cfg.Subscribers:
			s.role = roleSubscriber
		case i >= n-w.cfg.Silent:
			s.role = roleSilent
		}
		ss[i] = s
	}
	return ss
}

// watchList returns the users subscriber k (among subs) watches: up to
// Watch sessions of this worker that are not subscribers, on another
// gateway than its own when there is one, silent sessions first (so each
// silent one is watched), spread so that the subscribers together cover
// as many users as they can.
func (w *worker) watchList(sessions []*session, sub *session, k int) []string {
	var silent, cands []*session
	for _, s := range sessions {
		if s.role == roleSubscriber || s.c == nil {
			continue
		}
		if len(w.cfg.Addrs) > 1 && s.gw == sub.gw {
			continue
		}
		if s.role == roleSilent {
			silent = append(silent, s)
		} else {
			cands = append(cands, s)
		}
	}
	var users []string
	for _, s := range silent {
		if len(users) < w.cfg.Watch {
			users = append(users, s.user)
		}
	}
	left := w.cfg.Watch - len(users)
	if left >= len(cands) {
		for _, s := range cands {
			users = append(users, s.user)
		}
		return users
	}
	for j := range left {
		users = append(users, cands[(k*left+j)%len(cands)].user)
	}
	return users
}

// connect opens the sessions at ConnectRate, then subscribes the
// subscribers.
func (w *worker) connect(ctx context.Context, sessions []*session, token func(context.Context, string) (string, error), tlsConf *tls.Config) *ConnectReport {
	rep := &ConnectReport{Errors: map[string]int{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for i, s := range sessions {
		at := start.Add(time.Duration(float64(i) / w.cfg.ConnectRate * float64(time.Second)))
		if d := time.Until(at); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				wg.Wait()
				return rep
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := w.dialSession(ctx, s, token, tlsConf)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				w.failed.Add(1)
				rep.Failed++
				if k := err.Error(); len(rep.Errors) < 8 || rep.Errors[k] > 0 {
					rep.Errors[k]++
				}
				return
			}
			w.established.Add(1)
			rep.Established++
			rep.Connect.Record(d)
		}()
	}
	wg.Wait()
	watched := map[string]bool{}
	var swg sync.WaitGroup
	k := 0
	for _, s := range sessions {
		if s.role != roleSubscriber || s.c == nil {
			continue
		}
		users := w.watchList(sessions, s, k)
		k++
		if len(users) == 0 {
			continue
		}
		for _, u := range users {
			watched[u] = true
		}
		swg.Add(1)
		go func() {
			defer swg.Done()
			sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			sub, err := s.c.Subscribe(sctx, users...)
			if err != nil {
				w.log.Warn("subscribe failed", zap.String("user", s.user), zap.Error(err))
				return
			}
			mu.Lock()
			rep.Subscribed++
			mu.Unlock()
			go w.readEvents(s.g, sub)
		}()
	}
	swg.Wait()
	rep.Watched = len(watched)
	w.mu.Lock()
	for _, s := range sessions {
		if s.role == roleSilent && s.c != nil && watched[s.user] {
			w.silentUsers[s.user] = s
		}
	}
	w.mu.Unlock()
	return rep
}

func (w *worker) dialSession(ctx context.Context, s *session, token func(context.Context, string) (string, error), tlsConf *tls.Config) (time.Duration, error) {
	addrs := make([]string, 0, len(w.cfg.Addrs))
	for j := range w.cfg.Addrs {
		addrs = append(addrs, w.cfg.Addrs[(s.gw+j)%len(w.cfg.Addrs)])
	}
	cfg := client.Config{
		Addrs: addrs, User: s.user, Device: "bench", Status: statuses[s.cycle],
		Dial: w.dialFunc(&s.st, s.g), DialTimeout: 10 * time.Second,
		Backoff: client.Backoff{Min: 200 * time.Millisecond, Max: 2 * time.Second, Factor: 2},
		OnState: func(st client.State) {
			if !st.Connected && w.measuring.Load() {
				w.lost.Add(1)
			}
		},
	}
	cfg.TLS = tlsConf
	if token != nil {
		user := s.user
		cfg.Token = func(ctx context.Context) (string, error) { return token(ctx, user) }
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	t0 := time.Now()
	c, err := client.Dial(dctx, cfg)
	if err != nil {
		return 0, err
	}
	s.c = c
	return time.Since(t0), nil
}

// readEvents records, for subscriber sub, the propagation of status
// changes (an online event carrying the status last sent for its user)
// and the detection of silent sessions (their user's offline event, after
// an online one: a subscription's first event, read late, may be an
// offline from before the user's session reached the subscriber's
// gateway).
func (w *worker) readEvents(sub int, s *client.Subscription) {
	for ev := range s.Events() {
		now := w.now()
		w.mu.Lock()
		su := subUser{sub, ev.User}
		if ev.Online {
			w.onlineSeen[su] = true
		}
		if !ev.Online {
			if ss := w.silentUsers[ev.User]; ss != nil && ss.st.muted.Load() && w.onlineSeen[su] && !w.offlineSeen[ev.User] {
				w.offlineSeen[ev.User] = true
				w.offline.Record(time.Duration(now - ss.st.lastWrite.Load()))
			}
		} else if p := w.pending[ev.User]; p != nil && p.status == ev.Status && !p.seen[sub] {
			if p.seen == nil {
				p.seen = map[int]bool{}
			}
			p.seen[sub] = true
			if w.measuring.Load() {
				w.propagation.Record(time.Duration(now - p.sent))
			}
		}
		w.mu.Unlock()
	}
}

// load sends status changes at StatusRate and makes the silent sessions
// silent after SilentAfter, until ctx ends.
func (w *worker) load(ctx context.Context, sessions []*session) {
	var changers, silent []*session
	for _, s := range sessions {
		if s.c == nil {
			continue
		}
		switch s.role {
		case roleChanger:
			changers = append(changers, s)
		case roleSilent:
			silent = append(silent, s)
		}
	}
	start := time.Now()
	var silenceAt <-chan time.Time
	if len(silent) > 0 {
		t := time.NewTimer(w.cfg.SilentAfter)
		defer t.Stop()
		silenceAt = t.C
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var sent uint64
	var wg sync.WaitGroup
	defer wg.Wait()
	sem := make(chan struct{}, maxInFlight)
	rr := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-silenceAt:
			for _, s := range silent {
				s.st.muted.Store(true)
			}
		case <-tick.C:
		}
		if w.cfg.StatusRate <= 0 || len(changers) == 0 {
			continue
		}
		owed := uint64(w.cfg.StatusRate*time.Since(start).Seconds()) - min(sent, uint64(w.cfg.StatusRate*time.Since(start).Seconds()))
		for ; owed > 0; owed-- {
			sent++
			var s *session
			for range len(changers) {
				c := changers[rr%len(changers)]
				rr++
				if !c.flight.Load() {
					s = c
					break
				}
			}
			if s == nil {
				w.skipped.Add(1)
				continue
			}
			select {
			case sem <- struct{}{}:
			default:
				w.skipped.Add(1)
				continue
			}
			s.flight.Store(true)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem; s.flight.Store(false) }()
				w.change(ctx, s, start)
			}()
		}
	}
}

// change sends one status change and times its round trip.
func (w *worker) change(ctx context.Context, s *session, start time.Time) {
	s.cycle = (s.cycle + 1) % len(statuses)
	status := statuses[s.cycle]
	w.mu.Lock()
	w.pending[s.user] = &pendingChange{status: status, sent: w.now()}
	w.mu.Unlock()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	t0 := time.Now()
	err := s.c.Status(rctx, status)
	d := time.Since(t0)
	if err != nil {
		w.changeErrs.Add(1)
		return
	}
	w.changes.Add(1)
	sec := int(t0.Sub(start) / time.Second)
	w.mu.Lock()
	w.request.Record(d)
	for len(w.timeline) <= sec {
		w.timeline = append(w.timeline, Second{})
	}
	w.timeline[sec].Changes++
	w.timeline[sec].Request.Record(d)
	w.mu.Unlock()
}

func (w *worker) result(sessions []*session) *WorkerResult {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := &WorkerResult{
		Elapsed: max(time.Since(w.start), time.Nanosecond), Heartbeats: w.heartbeats.Load(),
		Changes: w.changes.Load(), ChangeErrors: w.changeErrs.Load(), Skipped: w.skipped.Load(), Lost: w.lost.Load(),
		Request: w.request.Clone(), Propagation: w.propagation.Clone(), Offline: w.offline.Clone(), Silent: len(w.silentUsers),
	}
	for _, s := range w.timeline {
		r.Timeline = append(r.Timeline, Second{Changes: s.Changes, Request: s.Request.Clone()})
	}
	return r
}

// progressLoop reports running counts every second.
func (w *worker) progressLoop(ctx context.Context, done <-chan struct{}) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-done:
			return
		case <-t.C:
			_ = w.out.send(Msg{Type: MsgProgress, Progress: &Progress{
				Established: int(w.established.Load()), Failed: int(w.failed.Load()),
				Heartbeats: w.heartbeats.Load(), Changes: w.changes.Load(),
			}})
		}
	}
}

// closeAll closes every session (bye), a few hundred at a time.
func (w *worker) closeAll(sessions []*session) {
	sem := make(chan struct{}, 512)
	var wg sync.WaitGroup
	for _, s := range sessions {
		if s.c == nil {
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			_ = s.c.Close()
		}()
	}
	wg.Wait()
}
