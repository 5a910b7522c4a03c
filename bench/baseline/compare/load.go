package compare

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rollcall/rollcall/bench/baseline/procstat"
)

// LoadConfig is a minimal presence load over Rollcall's client protocol
// (TCP JSON lines), with the flags of `rollcall bench`, so that either
// drives the comparison. Zero fields take the documented defaults.
type LoadConfig struct {
	// Addrs are the gateways' client addresses; sessions go round-robin.
	Addrs []string
	// Sessions is how many sessions to hold. Default 1000.
	Sessions int
	// Heartbeat is each session's plain hb interval. Default 5s.
	Heartbeat time.Duration
	// StatusRate is status changes per second over all sessions. Default 0.
	StatusRate float64
	// Subscribers is how many sessions each subscribe to 10 other users.
	// Default 0.
	Subscribers int
	// Duration is the measured window, after every session is connected
	// and one heartbeat interval has passed. Default 30s.
	Duration time.Duration
	// Concurrency bounds connects in flight. Default 200.
	Concurrency int
	// PIDs are server processes whose CPU is summed over the window.
	PIDs []int
	// User prefixes the users' names. Default "u".
	User string
}

// LoadResult is what a load measured; Go field names match the JSON the
// comparison reads from `rollcall bench --format json` where they overlap.
type LoadResult struct {
	Sessions          int     `json:"sessions"`
	Connected         int     `json:"connected"`
	DurationSeconds   float64 `json:"duration_seconds"`
	Heartbeats        int64   `json:"heartbeats"`
	StatusChanges     int64   `json:"status_changes"`
	Events            int64   `json:"events"`
	Errors            int64   `json:"errors"`
	Lost              int64   `json:"lost"`
	ServerCPUSeconds  float64 `json:"server_cpu_seconds"`
	HeartbeatsPerCore float64 `json:"heartbeats_per_core_second"`
}

func (c *LoadConfig) defaults() {
	if c.Sessions <= 0 {
		c.Sessions = 1000
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = 5 * time.Second
	}
	if c.Duration <= 0 {
		c.Duration = 30 * time.Second
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 200
	}
	if c.User == "" {
		c.User = "u"
	}
}

type session struct {
	nc net.Conn
	mu sync.Mutex
	bw *bufio.Writer
}

func (s *session) send(b []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := s.bw.Write(b); err != nil {
		return err
	}
	return s.bw.Flush()
}

// Load holds cfg.Sessions sessions, heartbeating and changing status, and
// measures the servers' CPU over the window.
func Load(ctx context.Context, cfg LoadConfig) (LoadResult, error) {
	cfg.defaults()
	res := LoadResult{Sessions: cfg.Sessions}
	if len(cfg.Addrs) == 0 {
		return res, fmt.Errorf("load: no gateway addresses")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var hbs, statuses, events, errs, lost atomic.Int64
	measuring := atomic.Bool{}
	sessions := make([]*session, cfg.Sessions)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		for _, s := range sessions {
			if s != nil {
				s.nc.Close()
			}
		}
		wg.Wait()
	}()
	sem := make(chan struct{}, cfg.Concurrency)
	var connectErr atomic.Value
	var cwg sync.WaitGroup
	for i := range cfg.Sessions {
		sem <- struct{}{}
		cwg.Go(func() {
			defer func() { <-sem }()
			s, err := dialSession(ctx, cfg.Addrs[i%len(cfg.Addrs)], cfg.User+strconv.Itoa(i))
			if err != nil {
				connectErr.Store(err)
				return
			}
			sessions[i] = s
		})
		if ctx.Err() != nil {
			break
		}
	}
	cwg.Wait()
	if err, _ := connectErr.Load().(error); err != nil {
		return res, fmt.Errorf("load: connecting: %w", err)
	}
	res.Connected = cfg.Sessions
	hb := []byte(`{"op":"hb"}` + "\n")
	for i, s := range sessions {
		wg.Go(func() { // reader: counts events, notices the end
			br := bufio.NewReaderSize(s.nc, 64<<10)
			for {
				line, err := br.ReadSlice('\n')
				if err != nil {
					if ctx.Err() == nil && measuring.Load() {
						lost.Add(1)
					}
					return
				}
				if strings.Contains(string(line[:min(len(line), 24)]), `"op":"event"`) {
					events.Add(1)
				} else if strings.Contains(string(line), `"op":"error"`) {
					errs.Add(1)
				}
			}
		})
		wg.Go(func() { // heartbeats, with a random phase
			t := time.NewTimer(rand.N(cfg.Heartbeat))
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				if s.send(hb) != nil {
					return
				}
				if measuring.Load() {
					hbs.Add(1)
				}
				t.Reset(cfg.Heartbeat)
			}
		})
		if i < cfg.Subscribers {
			users := make([]string, 10)
			for j := range users {
				users[j] = `"` + cfg.User + strconv.Itoa((i+1+j)%cfg.Sessions) + `"`
			}
			if err := s.send([]byte(`{"op":"sub","users":[` + strings.Join(users, ",") + `]}` + "\n")); err != nil {
				return res, fmt.Errorf("load: sub: %w", err)
			}
		}
	}
	if cfg.StatusRate > 0 {
		wg.Go(func() {
			every := time.Duration(float64(time.Second) / cfg.StatusRate)
			t := time.NewTicker(every)
			defer t.Stop()
			states := []string{"away", "available", "busy"}
			for n := 0; ; n++ {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				s := sessions[rand.N(len(sessions))]
				if s.send([]byte(`{"op":"status","status":"`+states[n%3]+`"}`+"\n")) == nil && measuring.Load() {
					statuses.Add(1)
				}
			}
		})
	}
	if err := sleep(ctx, cfg.Heartbeat); err != nil {
		return res, err
	}
	cpu0, err := procstat.SumCPU(cfg.PIDs)
	if err != nil {
		return res, err
	}
	measuring.Store(true)
	t0 := time.Now()
	if err := sleep(ctx, cfg.Duration); err != nil {
		return res, err
	}
	measuring.Store(false)
	res.DurationSeconds = time.Since(t0).Seconds()
	cpu1, err := procstat.SumCPU(cfg.PIDs)
	if err != nil {
		return res, err
	}
	res.ServerCPUSeconds = cpu1 - cpu0
	res.Heartbeats, res.StatusChanges, res.Events, res.Errors, res.Lost = hbs.Load(), statuses.Load(), events.Load(), errs.Load(), lost.Load()
	if res.ServerCPUSeconds > 0 {
		res.HeartbeatsPerCore = float64(res.Heartbeats) / res.ServerCPUSeconds
	}
	return res, nil
}

func dialSession(ctx context.Context, addr, user string) (*session, error) {
	d := net.Dialer{Timeout: 10 * time.Second}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &session{nc: nc, bw: bufio.NewWriter(nc)}
	if err := s.send([]byte(`{"op":"hello","user":"` + user + `","device":"d"}` + "\n")); err != nil {
		nc.Close()
		return nil, err
	}
	_ = nc.SetReadDeadline(time.Now().Add(30 * time.Second))
	line, err := bufio.NewReader(nc).ReadSlice('\n')
	_ = nc.SetReadDeadline(time.Time{})
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("%s: hello: %w", addr, err)
	}
	if !strings.Contains(string(line), `"op":"welcome"`) {
		nc.Close()
		return nil, fmt.Errorf("%s: hello answered %s", addr, strings.TrimSpace(string(line)))
	}
	return s, nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
