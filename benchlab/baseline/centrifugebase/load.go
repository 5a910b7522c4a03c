package centrifugebase

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	centrifugego "github.com/centrifugal/centrifuge-go"

	"github.com/rollcall/rollcall/bench"
)

// LoadConfig configures Load. Zero fields take the documented defaults.
type LoadConfig struct {
	// URLs are the servers' WebSocket URLs, which the sessions connect
	// to in turn. Required (URL or URLs).
	URLs []string
	// URL is one more server URL, put first in URLs.
	URL string
	// Sessions is how many clients to connect. Default 1000.
	Sessions int
	// Rooms is how many presence channels the sessions spread over, in
	// turn. Default 100.
	Rooms int
	// Concurrency bounds the connects in flight. Default 200.
	Concurrency int
	// ConnectRate is how many sessions start connecting per second; 0:
	// as fast as Concurrency allows.
	ConnectRate float64
	// ConnectTimeout is how long, after the last session started
	// connecting, the load waits for those not subscribed yet; then it
	// goes on with those that are. Default 30s.
	ConnectTimeout time.Duration
	// Subscribers is how many sessions (the first ones) also subscribe
	// to the status channels of rooms covering about Watch users each:
	// ceil(Watch / (Sessions / Rooms)) rooms, at most Rooms. Default 0.
	Subscribers int
	// Watch is how many users each subscriber watches. Default 1000.
	Watch int
	// StatusRate is how many status changes per second, in all, the
	// other sessions publish during the hold, each to its room's status
	// channel. Default 0: none.
	StatusRate float64
	// Hold is how long all sessions stay connected after the last one
	// subscribed, while the server's CPU is measured (the window).
	// Default 30s.
	Hold time.Duration
	// Settle is the wait between the last subscribe and the memory
	// sample, the start of the hold. Default 2s; negative: none.
	Settle time.Duration
	// PIDs are the server processes whose RSS and CPU are sampled and
	// summed; none skips the samples.
	PIDs []int
	// PID is one more server process, put first in PIDs.
	PID int
	// User prefixes the users' ids (USER0, USER1, ...). Default "u".
	User string
	// Ready, if set, is called once every session is subscribed and
	// sampled, before the hold.
	Ready func()
}

// LoadResult is what Load measured.
type LoadResult struct {
	// Sessions were requested; Subscribed connected and subscribed to
	// their room (established); Failed did not within the connect
	// timeout.
	Sessions       int     `json:"sessions"`
	Subscribed     int     `json:"subscribed"`
	Failed         int     `json:"failed"`
	ConnectSeconds float64 `json:"connect_seconds"`
	// Disconnects and Errors are the clients', over the whole run; Lost
	// the disconnects during the hold.
	Disconnects int64 `json:"disconnects"`
	Errors      int64 `json:"errors"`
	Lost        int64 `json:"lost"`
	// PIDs are the server processes sampled; the RSS and CPU figures are
	// their sums.
	PIDs          []int   `json:"server_pids,omitempty"`
	RSSBefore     int64   `json:"server_rss_before_bytes,omitempty"`
	RSSAfter      int64   `json:"server_rss_after_bytes,omitempty"`
	RSSPerSession float64 `json:"server_rss_per_session_bytes,omitempty"`
	// HoldSeconds is the window's length.
	HoldSeconds     float64 `json:"hold_seconds"`
	ServerCPU       float64 `json:"server_cpu_seconds,omitempty"`
	ServerCPUPerSec float64 `json:"server_cpu_per_second,omitempty"`
	// Pings are the server's pings the clients received (and answered)
	// during the hold: Centrifuge's heartbeat.
	Pings       int64   `json:"pings"`
	PingsPerSec float64 `json:"pings_per_second"`
	// StatusOK and StatusErrors are the status changes published during
	// the hold, acknowledged or not; StatusSkipped those not sent because
	// too many were in flight.
	StatusTarget  float64 `json:"status_target_per_second"`
	StatusOK      int64   `json:"status_ok"`
	StatusErrors  int64   `json:"status_errors"`
	StatusSkipped int64   `json:"status_skipped"`
	// StatusErrorKinds counts the errors by message.
	StatusErrorKinds map[string]int `json:"status_error_kinds,omitempty"`
	// Subscribers subscribed to WatchedRooms status channels each.
	Subscribers  int `json:"subscribers"`
	WatchedRooms int `json:"watched_rooms"`
	// Propagation is from a status change published to a subscriber on
	// another server (any server, with one URL) receiving it.
	Propagation bench.Quantiles `json:"propagation_ms"`
}

func (c *LoadConfig) defaults() {
	if c.URL != "" {
		c.URLs = append([]string{c.URL}, c.URLs...)
		c.URL = ""
	}
	if c.PID != 0 {
		c.PIDs = append([]int{c.PID}, c.PIDs...)
		c.PID = 0
	}
	if c.Sessions <= 0 {
		c.Sessions = 1000
	}
	if c.Rooms <= 0 {
		c.Rooms = 100
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 200
	}
	if c.ConnectTimeout <= 0 {
		c.ConnectTimeout = 30 * time.Second
	}
	c.Subscribers = min(max(c.Subscribers, 0), c.Sessions)
	if c.Watch <= 0 {
		c.Watch = 1000
	}
	if c.Hold <= 0 {
		c.Hold = 30 * time.Second
	}
	if c.Settle == 0 {
		c.Settle = 2 * time.Second
	}
	if c.User == "" {
		c.User = "u"
	}
}

// watchedRooms is how many rooms' status channels a subscriber
// subscribes to: enough to cover Watch users, at most all.
func (c *LoadConfig) watchedRooms() int {
	if c.Subscribers == 0 {
		return 0
	}
	perRoom := max(c.Sessions/c.Rooms, 1)
	return min((c.Watch+perRoom-1)/perRoom, c.Rooms)
}

// gatewayOf is the index of the URL session i connects to: in turn,
// shifted by one every round of rooms so that a room's members are on
// every server even when the servers divide the rooms.
func gatewayOf(i, rooms, gateways int) int {
	return (i + i/rooms) % gateways
}

// change is a status change's payload.
type change struct {
	Sent    int64 `json:"t"` // unix nanoseconds
	Gateway int   `json:"g"` // index of the publisher's URL
}

// sampleServers sums the RSS and CPU of pids.
func sampleServers(pids []int) (rss int64, cpu float64, err error) {
	for _, p := range pids {
		ps, err := bench.SampleProc("/proc", p)
		if err != nil {
			return 0, 0, err
		}
		rss += ps.RSSBytes
		cpu += ps.CPUSeconds
	}
	return rss, cpu, nil
}

// Load connects cfg.Sessions centrifuge-go clients, each subscribed to a
// room, the subscribers also to the status channels of the rooms they
// watch; keeps them connected for cfg.Hold (the server pings them, they
// pong), the other sessions publishing status changes at cfg.StatusRate;
// and disconnects them. With PIDs it reports the servers' RSS per session
// (VmRSS after all subscribed minus before any connected, over the
// sessions subscribed) and their CPU during the hold.
func Load(ctx context.Context, cfg LoadConfig) (LoadResult, error) {
	cfg.defaults()
	if len(cfg.URLs) == 0 {
		return LoadResult{}, fmt.Errorf("load: no server URL")
	}
	watched := cfg.watchedRooms()
	res := LoadResult{Sessions: cfg.Sessions, PIDs: cfg.PIDs, StatusTarget: max(cfg.StatusRate, 0),
		Subscribers: cfg.Subscribers, WatchedRooms: watched}
	if len(cfg.PIDs) > 0 {
		rss, _, err := sampleServers(cfg.PIDs)
		if err != nil {
			return res, err
		}
		res.RSSBefore = rss
	}
	var disconnects, errs, pings atomic.Int64
	var holding atomic.Bool
	var lost atomic.Int64
	var subscribed, statusSubscribed atomic.Int64
	var propMu sync.Mutex
	var prop bench.Histogram
	clients := make([]*centrifugego.Client, cfg.Sessions)
	defer func() {
		for _, c := range clients {
			if c != nil {
				c.Close()
			}
		}
	}()
	wantStatus := int64(cfg.Subscribers * watched)
	allSubscribed := make(chan struct{})
	var once sync.Once
	checkAll := func() {
		if subscribed.Load() == int64(cfg.Sessions) && statusSubscribed.Load() == wantStatus {
			once.Do(func() { close(allSubscribed) })
		}
	}
	sem := make(chan struct{}, cfg.Concurrency)
	dial := countingDialer(&pings)
	start := time.Now()
	for i := range cfg.Sessions {
		if cfg.ConnectRate > 0 {
			if err := sleep(ctx, time.Until(start.Add(time.Duration(float64(i)/cfg.ConnectRate*float64(time.Second))))); err != nil {
				return res, err
			}
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return res, ctx.Err()
		}
		gw := gatewayOf(i, cfg.Rooms, len(cfg.URLs))
		c := centrifugego.NewJsonClient(cfg.URLs[gw], centrifugego.Config{Token: cfg.User + strconv.Itoa(i),
			Name: "rollcall-bench", MaxReconnectDelay: 5 * time.Second, NetDialContext: dial})
		clients[i] = c
		// the subscriptions of this session the semaphore waits for
		pending := atomic.Int64{}
		pending.Store(1)
		if i < cfg.Subscribers {
			pending.Add(int64(watched))
		}
		// the semaphore is released once all are subscribed, or at the
		// client's first error (it keeps reconnecting on its own)
		var relOnce sync.Once
		rel := func() { relOnce.Do(func() { <-sem }) }
		release := func() {
			if pending.Add(-1) == 0 {
				rel()
			}
		}
		c.OnDisconnected(func(centrifugego.DisconnectedEvent) {
			disconnects.Add(1)
			if holding.Load() {
				lost.Add(1)
			}
		})
		c.OnError(func(centrifugego.ErrorEvent) { errs.Add(1); rel() })
		subscribe := func(channel string, counter *atomic.Int64, onPub func(centrifugego.PublicationEvent)) error {
			sub, err := c.NewSubscription(channel)
			if err != nil {
				return fmt.Errorf("load: subscription %s: %w", channel, err)
			}
			first := atomic.Bool{}
			sub.OnSubscribed(func(centrifugego.SubscribedEvent) {
				if first.CompareAndSwap(false, true) {
					release()
					counter.Add(1)
					checkAll()
				}
			})
			sub.OnError(func(centrifugego.SubscriptionErrorEvent) { errs.Add(1) })
			if onPub != nil {
				sub.OnPublication(onPub)
			}
			if err := sub.Subscribe(); err != nil {
				return fmt.Errorf("load: subscribe %s: %w", channel, err)
			}
			return nil
		}
		if err := subscribe(RoomPrefix+strconv.Itoa(i%cfg.Rooms), &subscribed, nil); err != nil {
			return res, err
		}
		if i < cfg.Subscribers {
			onPub := func(e centrifugego.PublicationEvent) {
				var ch change
				if json.Unmarshal(e.Data, &ch) != nil || (len(cfg.URLs) > 1 && ch.Gateway == gw) {
					return
				}
				d := time.Since(time.Unix(0, ch.Sent))
				propMu.Lock()
				prop.Record(d)
				propMu.Unlock()
			}
			for j := range watched {
				room := (i*watched + j) % cfg.Rooms
				if err := subscribe(StatusPrefix+strconv.Itoa(room), &statusSubscribed, onPub); err != nil {
					return res, err
				}
			}
		}
		if err := c.Connect(); err != nil {
			return res, fmt.Errorf("load: connect: %w", err)
		}
	}
	timeout := time.NewTimer(cfg.ConnectTimeout)
	select {
	case <-allSubscribed:
	case <-timeout.C:
	case <-ctx.Done():
		timeout.Stop()
		res.Subscribed = int(subscribed.Load())
		return res, ctx.Err()
	}
	timeout.Stop()
	res.ConnectSeconds = time.Since(start).Seconds()
	res.Subscribed = int(subscribed.Load())
	res.Failed = cfg.Sessions - res.Subscribed
	if res.Subscribed == 0 {
		return res, fmt.Errorf("load: no session subscribed within %v (%d client errors)", cfg.ConnectTimeout, errs.Load())
	}
	if cfg.Settle > 0 {
		if err := sleep(ctx, cfg.Settle); err != nil {
			return res, err
		}
	}
	var cpu0 float64
	if len(cfg.PIDs) > 0 {
		rss, cpu, err := sampleServers(cfg.PIDs)
		if err != nil {
			return res, err
		}
		res.RSSAfter = rss
		res.RSSPerSession = float64(res.RSSAfter-res.RSSBefore) / float64(res.Subscribed)
		cpu0 = cpu
	}
	if cfg.Ready != nil {
		cfg.Ready()
	}
	holding.Store(true)
	pings0 := pings.Load()
	t0 := time.Now()
	hctx, cancel := context.WithTimeout(ctx, cfg.Hold)
	changes := publish(hctx, cfg, clients)
	<-hctx.Done()
	cancel()
	err := ctx.Err()
	res.HoldSeconds = time.Since(t0).Seconds()
	res.Pings = pings.Load() - pings0
	if len(cfg.PIDs) > 0 {
		_, cpu, cerr := sampleServers(cfg.PIDs)
		if cerr != nil {
			return res, cerr
		}
		res.ServerCPU = cpu - cpu0
		res.ServerCPUPerSec = res.ServerCPU / res.HoldSeconds
	}
	holding.Store(false)
	st := changes()
	res.StatusOK, res.StatusErrors, res.StatusSkipped, res.StatusErrorKinds = st.ok, st.errors, st.skipped, st.kinds
	res.PingsPerSec = float64(res.Pings) / res.HoldSeconds
	res.Disconnects = disconnects.Load()
	res.Lost = lost.Load()
	res.Errors = errs.Load()
	propMu.Lock()
	res.Propagation = bench.QuantilesOf(&prop)
	propMu.Unlock()
	return res, err
}

type statusCounts struct {
	ok, errors, skipped int64
	kinds               map[string]int
}

// maxInFlight bounds the status changes awaiting their reply.
const maxInFlight = 1000

// publish publishes status changes at cfg.StatusRate from sessions
// other than the subscribers, picked at random, until ctx ends; the
// function it returns waits for those in flight (at most 5 s) and counts
// them.
func publish(ctx context.Context, cfg LoadConfig, clients []*centrifugego.Client) func() statusCounts {
	var ok, errs, skipped atomic.Int64
	var kindsMu sync.Mutex
	kinds := map[string]int{}
	var wg sync.WaitGroup
	done := make(chan struct{})
	changers := cfg.Sessions - cfg.Subscribers
	if cfg.StatusRate <= 0 || changers <= 0 {
		close(done)
	} else {
		go func() {
			defer close(done)
			inFlight := make(chan struct{}, maxInFlight)
			interval := time.Duration(float64(time.Second) / cfg.StatusRate)
			start := time.Now()
			for n := 0; ; n++ {
				if sleep(ctx, time.Until(start.Add(time.Duration(n)*interval))) != nil {
					return
				}
				select {
				case inFlight <- struct{}{}:
				default:
					skipped.Add(1)
					continue
				}
				i := cfg.Subscribers + rand.IntN(changers)
				data, _ := json.Marshal(change{Sent: time.Now().UnixNano(), Gateway: gatewayOf(i, cfg.Rooms, len(cfg.URLs))})
				wg.Go(func() {
					defer func() { <-inFlight }()
					pctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					defer cancel()
					if _, err := clients[i].Publish(pctx, StatusPrefix+strconv.Itoa(i%cfg.Rooms), data); err != nil {
						errs.Add(1)
						kindsMu.Lock()
						kinds[err.Error()]++
						kindsMu.Unlock()
						return
					}
					ok.Add(1)
				})
			}
		}()
	}
	return func() statusCounts {
		<-done
		wg.Wait()
		st := statusCounts{ok: ok.Load(), errors: errs.Load(), skipped: skipped.Load()}
		if len(kinds) > 0 {
			st.kinds = kinds
		}
		return st
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
