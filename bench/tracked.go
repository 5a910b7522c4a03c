package bench

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/rollcall/rollcall/auth"
	"github.com/rollcall/rollcall/client"
	"github.com/rollcall/rollcall/internal/tlsconf"
)

// TrackedConfig is a run of tracked sessions (rollcall bench --tracked):
// one backend connection tracks Sessions sessions on the gateway at Addr,
// holds them for Hold, heartbeats flowing, then closes; the report gives
// what they cost the gateway and how long it took to end them.
type TrackedConfig struct {
	// Addr is the gateway's client address (a ws:// URL of its /ws for
	// WebSocket).
	Addr string
	// Sessions to track (default 100,000): users <Run>-t<i>, device web,
	// each in group <Run>-tracked.
	Sessions int
	// Hold is how long the sessions are held before the gateway is
	// sampled (default 5s), so that it has merged and announced them.
	Hold time.Duration
	// TLS configures tls and wss; SecretFile holds the HS256 key to mint
	// the backend's token with (a token with the backend grant; empty
	// sends none, for a --dev agent).
	TLS        tlsconf.ClientFiles
	SecretFile string
	// PIDs are the gateway's process (nil: the one listening on Addr's
	// port); ProcRoot is where /proc is (default /proc).
	PIDs     []int
	ProcRoot string
	// HTTPAddr is the gateway's HTTP address, whose /metrics gives its Go
	// heap in use (optional).
	HTTPAddr string
	// Run names the users (default: the time).
	Run    string
	Logger *zap.Logger
}

// TrackedReport is what a tracked run measured.
type TrackedReport struct {
	Sessions int `json:"sessions"` // tracked: results without an error
	Refused  int `json:"refused"`  // results with one
	// TrackSeconds is the time from the first track to the last reply;
	// ServerCPUSeconds the gateway's CPU meanwhile.
	TrackSeconds     float64 `json:"track_seconds"`
	ServerCPUSeconds float64 `json:"server_cpu_seconds"`
	// RSSBytes is the gateway's resident memory before and after (held
	// Hold), and RSSPerSession the difference per tracked session: an
	// upper bound of what the sessions cost, the Go heap's room to grow
	// included.
	RSSBeforeBytes int64   `json:"rss_before_bytes"`
	RSSAfterBytes  int64   `json:"rss_after_bytes"`
	RSSPerSession  float64 `json:"rss_per_session_bytes"`
	// HeapPerSession is the growth of the gateway's Go heap in use
	// (go_memstats_heap_inuse_bytes) per tracked session; 0 without
	// HTTPAddr.
	HeapPerSession float64 `json:"heap_per_session_bytes,omitempty"`
	// EndSeconds is the time from the backend's close until a watcher saw
	// the sessions' group empty: all of them ended.
	EndSeconds float64 `json:"end_seconds"`
}

// RunTracked runs c.
func RunTracked(ctx context.Context, c TrackedConfig) (TrackedReport, error) {
	var rep TrackedReport
	if c.Sessions <= 0 {
		c.Sessions = 100_000
	}
	if c.Hold <= 0 {
		c.Hold = 5 * time.Second
	}
	if c.ProcRoot == "" {
		c.ProcRoot = "/proc"
	}
	if c.Run == "" {
		c.Run = "t" + strconv.FormatInt(time.Now().Unix(), 36)
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if len(c.PIDs) == 0 {
		found, err := FindListeners(c.ProcRoot, []string{c.Addr})
		if err != nil || len(found) == 0 {
			return rep, fmt.Errorf("bench: no process listening on %s found (give --pids): %v", c.Addr, err)
		}
		c.PIDs = found
	}
	var tlsConf *tls.Config
	if c.TLS.On() {
		var err error
		if tlsConf, err = c.TLS.Config(); err != nil {
			return rep, fmt.Errorf("bench: tls: %w", err)
		}
	}
	token, err := backendToken(c.SecretFile)
	if err != nil {
		return rep, err
	}
	dial := func(user string) (*client.Client, error) {
		cfg := client.Config{Addrs: []string{c.Addr}, User: user, Device: "bench", TLS: tlsConf, Logger: c.Logger}
		if token != nil {
			cfg.Token = func(context.Context) (string, error) { return token(user) }
		}
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return client.Dial(dctx, cfg)
	}
	group := c.Run + "-tracked"
	watcher, err := dial(c.Run + "-watcher")
	if err != nil {
		return rep, err
	}
	defer watcher.Close()
	backend, err := dial(c.Run + "-backend")
	if err != nil {
		return rep, err
	}
	defer backend.Close()
	hc := &http.Client{Timeout: 10 * time.Second}
	heap0, heapOK := heapInUse(ctx, hc, c.HTTPAddr)
	s0, ok := SampleAll(c.ProcRoot, c.PIDs)
	if !ok {
		return rep, errors.New("bench: cannot read the gateway's /proc")
	}
	sessions := make([]client.Tracked, c.Sessions)
	for i := range sessions {
		sessions[i] = client.Tracked{User: c.Run + "-t" + strconv.Itoa(i), Device: "web", Groups: []string{group}}
	}
	t0 := time.Now()
	rs, err := backend.Track(ctx, sessions)
	if err != nil {
		return rep, fmt.Errorf("bench: track: %w", err)
	}
	rep.TrackSeconds = time.Since(t0).Seconds()
	s1, _ := SampleAll(c.ProcRoot, c.PIDs)
	rep.ServerCPUSeconds = s1.CPUSeconds - s0.CPUSeconds
	for _, r := range rs {
		if client.TrackErr(r) != nil {
			rep.Refused++
		} else {
			rep.Sessions++
		}
	}
	select {
	case <-time.After(c.Hold):
	case <-ctx.Done():
		return rep, ctx.Err()
	}
	s2, _ := SampleAll(c.ProcRoot, c.PIDs)
	rep.RSSBeforeBytes, rep.RSSAfterBytes = s0.RSSBytes, s2.RSSBytes
	if rep.Sessions > 0 {
		rep.RSSPerSession = float64(s2.RSSBytes-s0.RSSBytes) / float64(rep.Sessions)
		if heap1, ok := heapInUse(ctx, hc, c.HTTPAddr); ok && heapOK {
			rep.HeapPerSession = (heap1 - heap0) / float64(rep.Sessions)
		}
	}
	if n, err := watcher.GroupCount(ctx, group); err != nil || n != rep.Sessions {
		c.Logger.Warn("the watcher does not see every tracked session", zap.Int("online", n), zap.Int("tracked", rep.Sessions), zap.Error(err))
	}
	t1 := time.Now()
	if err := backend.Close(); err != nil {
		return rep, err
	}
	for {
		n, err := watcher.GroupCount(ctx, group)
		if err != nil {
			return rep, fmt.Errorf("bench: group count: %w", err)
		}
		if n == 0 {
			break
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			return rep, ctx.Err()
		}
	}
	rep.EndSeconds = time.Since(t1).Seconds()
	return rep, nil
}

// backendToken returns a minter of tokens with the backend grant, signed
// with the key in secretFile, or nil for none.
func backendToken(secretFile string) (func(user string) (string, error), error) {
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
	return func(user string) (string, error) {
		return signer.Sign(auth.TokenSpec{User: user, TTL: time.Hour, Grants: &auth.GrantsClaim{Backend: true}}, time.Now())
	}, nil
}

// heapInUse reads go_memstats_heap_inuse_bytes from a gateway's /metrics.
func heapInUse(ctx context.Context, hc *http.Client, addr string) (float64, bool) {
	if addr == "" {
		return 0, false
	}
	req, err := http.NewRequestWithContext(ctx, "GET", metricsURL(addr), nil)
	if err != nil {
		return 0, false
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, false
	}
	const name = "go_memstats_heap_inuse_bytes"
	s, err := ParseMetrics(io.LimitReader(resp.Body, 64<<20), []string{name})
	if err != nil {
		return 0, false
	}
	v, ok := s[name]
	return v, ok
}

// WriteTable writes the report as lines for people.
func (r TrackedReport) WriteTable(w io.Writer) error {
	heap := ""
	if r.HeapPerSession != 0 {
		heap = fmt.Sprintf("  heap in use %.0f B/session", r.HeapPerSession)
	}
	_, err := fmt.Fprintf(w, "tracked %d sessions on one connection (%d refused) in %.2fs, server CPU %.2fs\n"+
		"memory: rss %.1f -> %.1f MiB, %.0f B/session%s\n"+
		"ended all of them %.0f ms after the backend closed\n",
		r.Sessions, r.Refused, r.TrackSeconds, r.ServerCPUSeconds,
		float64(r.RSSBeforeBytes)/(1<<20), float64(r.RSSAfterBytes)/(1<<20), r.RSSPerSession, heap, r.EndSeconds*1000)
	return err
}

// WriteJSON writes the report as one JSON object.
func (r TrackedReport) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
