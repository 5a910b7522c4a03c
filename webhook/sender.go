package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Sender delivers events to the configured URLs: Enqueue puts one
// delivery per URL on a bounded queue, Config.Concurrency workers send
// them over keep-alive connections, and a failed attempt (a transport
// error, a timeout, a status other than 2xx) is retried with exponential
// backoff up to Config.MaxAttempts. 410 Gone is not retried. Deliveries
// are not ordered: a retried event may arrive after a later one (the
// body's timestamp orders them).
//
// Its methods are safe for concurrent use; Enqueue never blocks.
type Sender struct {
	// Static after NewSender.
	cfg     Config
	client  *http.Client
	agent   string
	ctx     context.Context // canceled by Close: attempts in flight end
	cancel  context.CancelFunc
	now     func() time.Time                        // the webhook-timestamp clock; tests replace it
	after   func(time.Duration, func()) func() bool // time.AfterFunc; tests replace it
	jitter  func(time.Duration) time.Duration       // up to half of d off; tests replace it
	workers sync.WaitGroup

	mu      sync.Mutex
	cond    *sync.Cond // signalled on work, on an empty queue and on stop
	ready   []*delivery
	waiting map[*delivery]func() bool // deliveries waiting for a retry: their timers' Stop
	pending int                       // ready + in flight + waiting
	started bool
	stopped bool

	sent, failed, retried, dropped atomic.Uint64
}

// delivery is one event to one URL.
type delivery struct {
	ev       *Event
	url      string
	attempts int // made so far
}

// Stats counts a Sender's deliveries.
type Stats struct {
	Sent    uint64 // deliveries a receiver accepted (2xx)
	Failed  uint64 // deliveries given up: MaxAttempts reached, or 410 Gone
	Retried uint64 // failed attempts that were scheduled again
	Dropped uint64 // deliveries not queued (the queue was full) or abandoned when the sender closed
	Queued  int    // deliveries waiting, in flight or waiting for a retry
}

// NewSender returns a sender for cfg, which must have URLs; Start it.
func NewSender(cfg Config) (*Sender, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if !cfg.Enabled() {
		return nil, errors.New("webhook: no URL")
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = cfg.Concurrency * len(cfg.URLs)
	tr.MaxIdleConnsPerHost = cfg.Concurrency
	tr.MaxConnsPerHost = cfg.Concurrency // a bound, even while a dial races an idle connection's return
	tr.ResponseHeaderTimeout = cfg.Timeout
	tr.Proxy = http.ProxyFromEnvironment
	s := &Sender{
		cfg: cfg,
		client: &http.Client{
			Transport: tr,
			// A redirect is a failure (the specification: update the
			// URL instead); its response is the attempt's.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		agent:   "rollcall-webhook",
		now:     time.Now,
		after:   func(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop },
		jitter:  func(d time.Duration) time.Duration { return d - rand.N(d/2+1) },
		waiting: make(map[*delivery]func() bool),
	}
	if cfg.Gateway != "" {
		s.agent += " (gateway " + cfg.Gateway + ")"
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.cond = sync.NewCond(&s.mu)
	return s, nil
}

// Start starts the workers. Later calls do nothing.
func (s *Sender) Start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started || s.stopped {
		return
	}
	s.started = true
	s.workers.Add(s.cfg.Concurrency)
	for range s.cfg.Concurrency {
		go s.work()
	}
}

// Enqueue queues ev for every URL and returns how many deliveries were
// queued; one that finds the queue full is dropped and counted.
func (s *Sender) Enqueue(ev *Event) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	queued := 0
	for _, u := range s.cfg.URLs {
		if s.stopped || s.pending >= s.cfg.Queue {
			s.dropped.Add(1)
			continue
		}
		s.pending++
		s.ready = append(s.ready, &delivery{ev: ev, url: u})
		queued++
	}
	if queued > 0 {
		s.cond.Broadcast()
	}
	return queued
}

// Flush waits until no delivery is queued, in flight or waiting for a
// retry, or until ctx ends (its error is returned then).
func (s *Sender) Flush(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() {
		s.mu.Lock()
		s.cond.Broadcast()
		s.mu.Unlock()
	})
	defer stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.pending > 0 && !s.stopped {
		if err := ctx.Err(); err != nil {
			return err
		}
		s.cond.Wait()
	}
	return nil
}

// Close stops the sender at once: attempts in flight are canceled, and
// what is queued or waiting for a retry is dropped and counted. Flush
// first to deliver it.
func (s *Sender) Close() {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return
	}
	s.stopped = true
	for d, stop := range s.waiting {
		stop()
		delete(s.waiting, d)
	}
	s.ready = nil
	s.cond.Broadcast()
	s.mu.Unlock()
	s.cancel()
	s.workers.Wait()
	// What is left was queued, waiting, or in flight and canceled.
	s.mu.Lock()
	s.dropped.Add(uint64(s.pending))
	s.pending = 0
	s.mu.Unlock()
}

// Stats returns the counters.
func (s *Sender) Stats() Stats {
	s.mu.Lock()
	q := s.pending
	s.mu.Unlock()
	return Stats{Sent: s.sent.Load(), Failed: s.failed.Load(), Retried: s.retried.Load(), Dropped: s.dropped.Load(), Queued: q}
}

func (s *Sender) work() {
	defer s.workers.Done()
	for {
		s.mu.Lock()
		for len(s.ready) == 0 && !s.stopped {
			s.cond.Wait()
		}
		if s.stopped {
			s.mu.Unlock()
			return
		}
		d := s.ready[0]
		s.ready[0] = nil
		s.ready = s.ready[1:]
		s.mu.Unlock()
		s.deliver(d)
	}
}

// deliver makes one attempt of d and settles it: done, given up, or
// scheduled again.
func (s *Sender) deliver(d *delivery) {
	d.attempts++
	retryAfter, err := s.attempt(d)
	if err == nil {
		s.sent.Add(1)
		s.finish()
		return
	}
	if s.ctx.Err() != nil {
		return // closing: Close counts it
	}
	var gone goneError
	if errors.As(err, &gone) || d.attempts >= s.cfg.MaxAttempts {
		s.failed.Add(1)
		if s.cfg.Report != nil {
			s.cfg.Report(d.url, d.ev, d.attempts, err)
		}
		s.finish()
		return
	}
	s.retried.Add(1)
	wait := s.backoff(d.attempts)
	if retryAfter > wait {
		wait = min(retryAfter, s.cfg.MaxBackoff)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	s.waiting[d] = s.after(wait, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if _, ok := s.waiting[d]; !ok {
			return // Close stopped it
		}
		delete(s.waiting, d)
		s.ready = append(s.ready, d)
		s.cond.Broadcast()
	})
}

// backoff is the wait before the retry that follows attempt n (1-based).
func (s *Sender) backoff(n int) time.Duration {
	d := s.cfg.MinBackoff
	for i := 1; i < n && d < s.cfg.MaxBackoff; i++ {
		d *= 2
	}
	return s.jitter(min(d, s.cfg.MaxBackoff))
}

func (s *Sender) finish() {
	s.mu.Lock()
	s.pending--
	if s.pending == 0 {
		s.cond.Broadcast()
	}
	s.mu.Unlock()
}

// goneError is a 410 answer: the receiver wants no more.
type goneError struct{ status int }

func (e goneError) Error() string {
	return fmt.Sprintf("status %d: the receiver wants no more webhooks", e.status)
}

// maxResponseBody is what is read of a response before the connection is
// reused (a longer body closes it instead).
const maxResponseBody = 64 << 10

// attempt posts d once. It returns nil on a 2xx answer, else the error and
// the Retry-After the receiver asked for (0: none).
func (s *Sender) attempt(d *delivery) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.url, bytes.NewReader(d.ev.Body))
	if err != nil {
		return 0, err
	}
	ts := s.now().Unix()
	h := req.Header
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", s.agent)
	h.Set(HeaderID, d.ev.ID)
	h.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
	h.Set(HeaderSignature, signatures(s.cfg.Secrets, d.ev.ID, ts, d.ev.Body))
	resp, err := s.client.Do(req)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return 0, fmt.Errorf("no answer within %v: %w", s.cfg.Timeout, err)
		}
		return 0, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxResponseBody))
	resp.Body.Close()
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return 0, nil
	case resp.StatusCode == http.StatusGone:
		return 0, goneError{resp.StatusCode}
	}
	var retryAfter time.Duration
	if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && secs > 0 {
		retryAfter = time.Duration(secs) * time.Second
	}
	return retryAfter, fmt.Errorf("status %d", resp.StatusCode)
}
