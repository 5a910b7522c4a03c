package webhook

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rollcall/rollcall/internal/testkit"
)

// receiver is a test endpoint that verifies every request and records the
// ids it accepted; fail decides, per request, to answer 500 instead.
type receiver struct {
	t    *testing.T
	keys [][]byte
	fail func(n int) int // the status to answer the nth request (0-based) with; 0: 204

	mu       sync.Mutex
	requests int
	accepted map[string]int // id -> times accepted
	conns    atomic.Int64
	srv      *httptest.Server
}

func newReceiver(t *testing.T, keys [][]byte, fail func(int) int) *receiver {
	r := &receiver{t: t, keys: keys, fail: fail, accepted: map[string]int{}}
	r.srv = httptest.NewUnstartedServer(http.HandlerFunc(r.serve))
	r.srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			r.conns.Add(1)
		}
	}
	r.srv.Start()
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return
	}
	if err := Verify(req.Header, body, r.keys, time.Now(), 5*time.Minute); err != nil {
		r.t.Errorf("request %s: %v", req.Header.Get(HeaderID), err)
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	r.mu.Lock()
	n := r.requests
	r.requests++
	status := 0
	if r.fail != nil {
		status = r.fail(n)
	}
	if status == 0 {
		r.accepted[req.Header.Get(HeaderID)]++
	}
	r.mu.Unlock()
	if status != 0 {
		w.WriteHeader(status)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (r *receiver) acceptedIDs() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int, len(r.accepted))
	for k, v := range r.accepted {
		out[k] = v
	}
	return out
}

func testSender(t *testing.T, urls []string, keys [][]byte, tweak func(*Config)) *Sender {
	cfg := DefaultConfig()
	cfg.URLs, cfg.Secrets = urls, keys
	cfg.MinBackoff, cfg.MaxBackoff = time.Millisecond, 20*time.Millisecond
	cfg.MaxAttempts = 50
	if tweak != nil {
		tweak(&cfg)
	}
	s, err := NewSender(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	s.Start()
	return s
}

func events(n int) []*Event {
	out := make([]*Event, n)
	for i := range out {
		out[i] = &Event{ID: fmt.Sprintf("msg_%d", i), User: fmt.Sprintf("u%d", i), Body: []byte(fmt.Sprintf(`{"n":%d}`, i))}
	}
	return out
}

func flush(t *testing.T, s *Sender) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Flush(ctx); err != nil {
		t.Fatalf("flush: %v (%+v)", err, s.Stats())
	}
}

// TestSenderDeliversEachEventOnceOverKeptConnections: every event reaches
// each URL once, signed, over at most Concurrency connections per URL.
func TestSenderDeliversEachEventOnceOverKeptConnections(t *testing.T) {
	keys := [][]byte{NewSecret(), NewSecret()}
	a, b := newReceiver(t, keys[1:], nil), newReceiver(t, keys[:1], nil)
	s := testSender(t, []string{a.srv.URL, b.srv.URL}, keys, func(c *Config) { c.Concurrency = 4 })
	evs := events(200)
	for _, ev := range evs {
		if s.Enqueue(ev) != 2 {
			t.Fatal("not queued")
		}
	}
	flush(t, s)
	for _, r := range []*receiver{a, b} {
		got := r.acceptedIDs()
		for _, ev := range evs {
			if got[ev.ID] != 1 {
				t.Fatalf("%s accepted %d times", ev.ID, got[ev.ID])
			}
		}
		if c := r.conns.Load(); c > 4 {
			t.Errorf("%d connections for 200 requests at concurrency 4: not kept alive", c)
		}
	}
	if st := s.Stats(); st.Sent != 400 || st.Retried != 0 || st.Failed != 0 || st.Dropped != 0 || st.Queued != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestSenderLosesNothingWhenHalfTheRequestsFail: a receiver that answers
// 500 to every other request still gets every event, once accepted, with
// the same id on each attempt.
func TestSenderLosesNothingWhenHalfTheRequestsFail(t *testing.T) {
	keys := [][]byte{NewSecret()}
	r := newReceiver(t, keys, func(n int) int {
		if n%2 == 0 {
			return http.StatusInternalServerError
		}
		return 0
	})
	s := testSender(t, []string{r.srv.URL}, keys, nil)
	evs := events(100)
	for _, ev := range evs {
		s.Enqueue(ev)
	}
	flush(t, s)
	got := r.acceptedIDs()
	for _, ev := range evs {
		if got[ev.ID] != 1 {
			t.Fatalf("%s accepted %d times", ev.ID, got[ev.ID])
		}
	}
	if st := s.Stats(); st.Sent != 100 || st.Retried < 50 || st.Failed != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestSenderGivesUp: a delivery is given up after MaxAttempts, or at once
// on 410 Gone, and reported.
func TestSenderGivesUp(t *testing.T) {
	keys := [][]byte{NewSecret()}
	down := newReceiver(t, keys, func(int) int { return http.StatusServiceUnavailable })
	gone := newReceiver(t, keys, func(int) int { return http.StatusGone })
	var mu sync.Mutex
	reports := map[string]int{}
	s := testSender(t, []string{down.srv.URL, gone.srv.URL}, keys, func(c *Config) {
		c.MaxAttempts = 3
		c.Report = func(url string, _ *Event, attempts int, _ error) {
			mu.Lock()
			reports[url] = attempts
			mu.Unlock()
		}
	})
	s.Enqueue(events(1)[0])
	flush(t, s)
	mu.Lock()
	defer mu.Unlock()
	if reports[down.srv.URL] != 3 || reports[gone.srv.URL] != 1 {
		t.Fatalf("reports %v", reports)
	}
	if st := s.Stats(); st.Failed != 2 || st.Retried != 2 || st.Sent != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestSenderDropsPastItsQueue: deliveries past Queue are dropped and
// counted, and Close drops what is left.
func TestSenderDropsPastItsQueue(t *testing.T) {
	keys := [][]byte{NewSecret()}
	release := make(chan struct{})
	var once sync.Once
	blocked := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(blocked.Close)
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	s := testSender(t, []string{blocked.URL}, keys, func(c *Config) { c.Queue = 5; c.Concurrency = 1 })
	queued := 0
	for _, ev := range events(8) {
		queued += s.Enqueue(ev)
	}
	if st := s.Stats(); queued != 5 || st.Dropped != 3 || st.Queued != 5 {
		t.Fatalf("queued %d, stats %+v", queued, st)
	}
	s.Close()
	if st := s.Stats(); st.Dropped != 8 || st.Queued != 0 || s.Enqueue(events(1)[0]) != 0 {
		t.Fatalf("after close: %+v", st)
	}
}

// TestSenderWaitsRetryAfter: a Retry-After longer than the backoff is
// waited (up to MaxBackoff); the test's clock-free check is the wait the
// sender schedules.
func TestSenderWaitsRetryAfter(t *testing.T) {
	keys := [][]byte{NewSecret()}
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	s := testSender(t, []string{srv.URL}, keys, func(c *Config) { c.MaxBackoff = 5 * time.Second })
	var mu sync.Mutex
	var waits []time.Duration
	s.after = func(d time.Duration, f func()) func() bool {
		mu.Lock()
		waits = append(waits, d)
		mu.Unlock()
		go f()
		return func() bool { return false }
	}
	s.Enqueue(events(1)[0])
	flush(t, s)
	mu.Lock()
	defer mu.Unlock()
	if len(waits) != 1 || waits[0] != 5*time.Second {
		t.Fatalf("waits %v, want [5s] (Retry-After 7s capped by MaxBackoff)", waits)
	}
	testkit.WaitFor(t, 30*time.Second, "the retry", func() bool { return calls.Load() == 2 })
}

func TestBackoffDoublesToItsBound(t *testing.T) {
	s := &Sender{cfg: Config{MinBackoff: time.Second, MaxBackoff: 10 * time.Second}, jitter: func(d time.Duration) time.Duration { return d }}
	want := []time.Duration{1, 2, 4, 8, 10, 10}
	for i, w := range want {
		if got := s.backoff(i + 1); got != w*time.Second {
			t.Errorf("backoff(%d) = %v, want %v", i+1, got, w*time.Second)
		}
	}
	real, _ := NewSender(Config{URLs: []string{"http://x"}, Secrets: [][]byte{NewSecret()}})
	for range 100 {
		if d := real.jitter(time.Second); d < time.Second/2 || d > time.Second {
			t.Fatalf("jitter %v outside [0.5s, 1s]", d)
		}
	}
}
