package centrifugebase

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	centrifugego "github.com/centrifugal/centrifuge-go"

	"github.com/rollcall/rollcall/bench"
)

// LoadConfig configures Load. Zero fields take the documented defaults.
type LoadConfig struct {
	// URL is the server's WebSocket URL. Required.
	URL string
	// Sessions is how many clients to connect. Default 1000.
	Sessions int
	// Rooms is how many presence channels the sessions spread over, in
	// turn. Default 100.
	Rooms int
	// Concurrency bounds the connects in flight. Default 200.
	Concurrency int
	// Hold is how long all sessions stay connected after the last one
	// subscribed, while the server's CPU is measured. Default 30s.
	Hold time.Duration
	// Settle is the wait between the last subscribe and the memory
	// sample. Default 2s.
	Settle time.Duration
	// PID is the server's process, whose RSS and CPU are sampled; 0 skips
	// the samples.
	PID int
	// User prefixes the users' ids (USER0, USER1, ...). Default "u".
	User string
	// Ready, if set, is called once every session is subscribed and
	// sampled, before the hold.
	Ready func()
}

// LoadResult is what Load measured.
type LoadResult struct {
	Sessions        int     `json:"sessions"`
	Subscribed      int     `json:"subscribed"`
	ConnectSeconds  float64 `json:"connect_seconds"`
	Disconnects     int64   `json:"disconnects"`
	Errors          int64   `json:"errors"`
	RSSBefore       int64   `json:"server_rss_before_bytes,omitempty"`
	RSSAfter        int64   `json:"server_rss_after_bytes,omitempty"`
	RSSPerSession   float64 `json:"server_rss_per_session_bytes,omitempty"`
	HoldSeconds     float64 `json:"hold_seconds"`
	ServerCPU       float64 `json:"server_cpu_seconds,omitempty"`
	ServerCPUPerSec float64 `json:"server_cpu_per_second,omitempty"`
}

func (c *LoadConfig) defaults() {
	if c.Sessions <= 0 {
		c.Sessions = 1000
	}
	if c.Rooms <= 0 {
		c.Rooms = 100
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 200
	}
	if c.Hold <= 0 {
		c.Hold = 30 * time.Second
	}
	if c.Settle <= 0 {
		c.Settle = 2 * time.Second
	}
	if c.User == "" {
		c.User = "u"
	}
}

// Load connects cfg.Sessions centrifuge-go clients, each subscribed to a
// room, keeps them connected for cfg.Hold (the server pings them, they
// pong) and disconnects them. With a PID it reports the server's RSS per
// session (VmRSS after all subscribed minus before any connected, over
// the sessions) and its CPU during the hold.
func Load(ctx context.Context, cfg LoadConfig) (LoadResult, error) {
	cfg.defaults()
	if cfg.URL == "" {
		return LoadResult{}, fmt.Errorf("load: no server URL")
	}
	res := LoadResult{Sessions: cfg.Sessions}
	if cfg.PID != 0 {
		ps, err := bench.SampleProc("/proc", cfg.PID)
		if err != nil {
			return res, err
		}
		r := ps.RSSBytes
		res.RSSBefore = r
	}
	var disconnects, errs atomic.Int64
	var subscribed atomic.Int64
	clients := make([]*centrifugego.Client, cfg.Sessions)
	defer func() {
		for _, c := range clients {
			if c != nil {
				c.Close()
			}
		}
	}()
	allSubscribed := make(chan struct{})
	var once sync.Once
	sem := make(chan struct{}, cfg.Concurrency)
	start := time.Now()
	for i := range cfg.Sessions {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return res, ctx.Err()
		}
		c := centrifugego.NewJsonClient(cfg.URL, centrifugego.Config{Token: cfg.User + strconv.Itoa(i),
			Name: "rollcall-bench", MaxReconnectDelay: 5 * time.Second})
		clients[i] = c
		released := atomic.Bool{}
		release := func() {
			if released.CompareAndSwap(false, true) {
				<-sem
			}
		}
		c.OnDisconnected(func(centrifugego.DisconnectedEvent) { disconnects.Add(1) })
		c.OnError(func(centrifugego.ErrorEvent) { errs.Add(1); release() })
		sub, err := c.NewSubscription(RoomPrefix + strconv.Itoa(i%cfg.Rooms))
		if err != nil {
			return res, fmt.Errorf("load: subscription: %w", err)
		}
		first := atomic.Bool{}
		sub.OnSubscribed(func(centrifugego.SubscribedEvent) {
			release()
			if first.CompareAndSwap(false, true) && subscribed.Add(1) == int64(cfg.Sessions) {
				once.Do(func() { close(allSubscribed) })
			}
		})
		sub.OnError(func(centrifugego.SubscriptionErrorEvent) { errs.Add(1); release() })
		if err := sub.Subscribe(); err != nil {
			return res, fmt.Errorf("load: subscribe: %w", err)
		}
		if err := c.Connect(); err != nil {
			return res, fmt.Errorf("load: connect: %w", err)
		}
	}
	select {
	case <-allSubscribed:
	case <-ctx.Done():
		res.Subscribed = int(subscribed.Load())
		return res, ctx.Err()
	}
	res.ConnectSeconds = time.Since(start).Seconds()
	res.Subscribed = int(subscribed.Load())
	if err := sleep(ctx, cfg.Settle); err != nil {
		return res, err
	}
	var cpu0 float64
	if cfg.PID != 0 {
		ps, err := bench.SampleProc("/proc", cfg.PID)
		if err != nil {
			return res, err
		}
		res.RSSAfter = ps.RSSBytes
		res.RSSPerSession = float64(res.RSSAfter-res.RSSBefore) / float64(cfg.Sessions)
		cpu0 = ps.CPUSeconds
	}
	if cfg.Ready != nil {
		cfg.Ready()
	}
	t0 := time.Now()
	err := sleep(ctx, cfg.Hold)
	res.HoldSeconds = time.Since(t0).Seconds()
	if cfg.PID != 0 {
		ps, cerr := bench.SampleProc("/proc", cfg.PID)
		if cerr != nil {
			return res, cerr
		}
		res.ServerCPU = ps.CPUSeconds - cpu0
		res.ServerCPUPerSec = res.ServerCPU / res.HoldSeconds
	}
	res.Disconnects = disconnects.Load()
	res.Errors = errs.Load()
	return res, err
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
