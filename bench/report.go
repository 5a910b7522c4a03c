package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is a run's results. Fields that could not be measured (no
// server process found, no /metrics) are nil or zero, as their docs say.
type Report struct {
	Config   RunConfig `json:"config"`
	Duration float64   `json:"duration_s"` // the measured window

	Sessions struct {
		Requested   int            `json:"requested"`
		Established int            `json:"established"`
		Failed      int            `json:"failed"`
		Errors      map[string]int `json:"errors,omitempty"`
		Lost        uint64         `json:"lost"` // connections lost during the window
	} `json:"sessions"`
	Connect Quantiles `json:"connect_ms"`

	Heartbeats struct {
		IntervalMS int64   `json:"interval_ms"`
		Sent       uint64  `json:"sent"`
		PerSec     float64 `json:"per_s"`
		// ServerPerSec is the gateways' own count (rollcall_requests_total
		// {op="hb"}) over the window; nil without /metrics.
		ServerPerSec *float64 `json:"server_per_s"`
	} `json:"heartbeats"`

	StatusChanges struct {
		Target  float64 `json:"target_per_s"`
		OK      uint64  `json:"ok"`
		Errors  uint64  `json:"errors"`
		Skipped uint64  `json:"skipped"`
		PerSec  float64 `json:"per_s"`
	} `json:"status_changes"`
	Request     Quantiles `json:"request_ms"`     // status round trips
	Propagation Quantiles `json:"propagation_ms"` // status sent -> subscriber's event

	Subscribers struct {
		Subscribed int `json:"subscribed"`
		Watched    int `json:"watched_users"`
	} `json:"subscribers"`

	Offline struct {
		Silent    int       `json:"silent"`
		Detected  uint64    `json:"detected"`
		TimeoutMS int64     `json:"server_timeout_ms"`
		Detection Quantiles `json:"detection_ms"`      // last line written -> offline event
		Beyond    Quantiles `json:"beyond_timeout_ms"` // the same minus the server timeout
	} `json:"offline"`

	Server struct {
		PIDs                 []int    `json:"pids"`
		CPUCoreSeconds       *float64 `json:"cpu_core_seconds"`
		CPUPerHeartbeatUS    *float64 `json:"cpu_per_heartbeat_us"`
		RSSBeforeBytes       int64    `json:"rss_before_bytes"`
		RSSAfterConnectBytes int64    `json:"rss_after_connect_bytes"`
		RSSEndBytes          int64    `json:"rss_end_bytes"`
		RSSPerSessionBytes   float64  `json:"rss_per_session_bytes"`
	} `json:"server"`

	Gossip struct {
		Bytes     *float64 `json:"bytes"`
		PerChange *float64 `json:"bytes_per_change"`
	} `json:"gossip"`

	// Probe is the probe generator's window (Config.ProbeRate); nil
	// without one.
	Probe *ProbeReport `json:"probe,omitempty"`

	// Timeline is the status round trip per second of the window.
	Timeline []TimelinePoint `json:"timeline"`

	connect, request, propagation, offline Histogram
	seconds                                []Second
}

// ProbeReport is the probe generator's measure: status changes of a few
// sessions, each seen by subscribers homed on other gateways.
type ProbeReport struct {
	Sessions    int       `json:"sessions"`
	Subscribed  int       `json:"subscribed"`
	Priority    string    `json:"priority"` // fifo, nice or normal
	Changes     uint64    `json:"changes"`
	Errors      uint64    `json:"errors"`
	Request     Quantiles `json:"request_ms"`
	Propagation Quantiles `json:"propagation_ms"`
}

func (p *ProbeReport) add(w *WorkerResult) {
	p.Priority = w.Priority
	if p.Priority == "" {
		p.Priority = "normal"
	}
	p.Changes, p.Errors = w.Changes, w.ChangeErrors
	p.Request, p.Propagation = QuantilesOf(&w.Request), QuantilesOf(&w.Propagation)
}

// RunConfig is the configuration a report was made with.
type RunConfig struct {
	Addrs       []string `json:"addrs"`
	Transport   string   `json:"transport"`
	Sessions    int      `json:"sessions"`
	Procs       int      `json:"procs"`
	ConnectRate float64  `json:"connect_rate"`
	HeartbeatMS int64    `json:"heartbeat_ms"` // 0: the gateways'
	StatusRate  float64  `json:"status_rate"`
	Subscribers int      `json:"subscribers"`
	Watch       int      `json:"watch"`
	Silent      int      `json:"silent_failures"`
	ProbeRate   float64  `json:"probe_rate,omitempty"`
	WarmupS     float64  `json:"warmup_s"`
	DurationS   float64  `json:"duration_s"`
}

func reportConfig(c Config) RunConfig {
	return RunConfig{Addrs: c.Addrs, Transport: c.Transport, Sessions: c.Sessions, Procs: c.Procs,
		ConnectRate: c.ConnectRate, HeartbeatMS: c.Heartbeat.Milliseconds(), StatusRate: c.StatusRate,
		Subscribers: c.Subscribers, Watch: c.Watch, Silent: c.SilentFailures, ProbeRate: c.ProbeRate, WarmupS: c.Warmup.Seconds(), DurationS: c.Duration.Seconds()}
}

// Quantiles summarise a histogram, in milliseconds.
type Quantiles struct {
	Count uint64  `json:"count"`
	P50   float64 `json:"p50"`
	P99   float64 `json:"p99"`
	P999  float64 `json:"p999"`
	Max   float64 `json:"max"`
	Mean  float64 `json:"mean"`
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// QuantilesOf summarises h.
func QuantilesOf(h *Histogram) Quantiles {
	return Quantiles{Count: h.Count(), P50: ms(h.Quantile(0.5)), P99: ms(h.Quantile(0.99)),
		P999: ms(h.Quantile(0.999)), Max: ms(h.Max()), Mean: ms(h.Mean())}
}

// TimelinePoint is one second of status round trips.
type TimelinePoint struct {
	Second  int     `json:"t_s"`
	Changes uint64  `json:"changes"`
	P50     float64 `json:"p50_ms"`
	P99     float64 `json:"p99_ms"`
}

func (r *Report) addConnected(c *ConnectReport) {
	r.Sessions.Established += c.Established
	r.Sessions.Failed += c.Failed
	for k, v := range c.Errors {
		if r.Sessions.Errors == nil {
			r.Sessions.Errors = map[string]int{}
		}
		r.Sessions.Errors[k] += v
	}
	r.connect.Merge(&c.Connect)
	r.Subscribers.Subscribed += c.Subscribed
	r.Subscribers.Watched += c.Watched
	r.Offline.TimeoutMS = max(r.Offline.TimeoutMS, c.TimeoutMS)
	r.Heartbeats.IntervalMS = max(r.Heartbeats.IntervalMS, c.HeartbeatMS)
}

func (r *Report) addResult(w *WorkerResult) {
	r.Heartbeats.Sent += w.Heartbeats
	r.Heartbeats.PerSec += float64(w.Heartbeats) / w.Elapsed.Seconds()
	r.StatusChanges.OK += w.Changes
	r.StatusChanges.Errors += w.ChangeErrors
	r.StatusChanges.Skipped += w.Skipped
	r.StatusChanges.PerSec += float64(w.Changes) / w.Elapsed.Seconds()
	r.Sessions.Lost += w.Lost
	r.request.Merge(&w.Request)
	r.propagation.Merge(&w.Propagation)
	r.offline.Merge(&w.Offline)
	r.Offline.Silent += w.Silent
	for i, s := range w.Timeline {
		for len(r.seconds) <= i {
			r.seconds = append(r.seconds, Second{})
		}
		r.seconds[i].Changes += s.Changes
		r.seconds[i].Request.Merge(&s.Request)
	}
}

func (r *Report) addScraped(m0, m1 Scraped, elapsed time.Duration) {
	if v1, ok := m1[metricHeartbeats]; ok {
		rate := (v1 - m0[metricHeartbeats]) / elapsed.Seconds()
		r.Heartbeats.ServerPerSec = &rate
	}
	if v1, ok := m1[metricGossipBytes]; ok {
		b := v1 - m0[metricGossipBytes]
		r.Gossip.Bytes = &b
	}
}

// finish computes the summaries from the merged histograms.
func (r *Report) finish() {
	r.Sessions.Requested = r.Config.Sessions
	r.StatusChanges.Target = r.Config.StatusRate
	r.Connect = QuantilesOf(&r.connect)
	r.Request = QuantilesOf(&r.request)
	r.Propagation = QuantilesOf(&r.propagation)
	r.Offline.Detected = r.offline.Count()
	r.Offline.Detection = QuantilesOf(&r.offline)
	beyond := r.Offline.Detection
	if beyond.Count > 0 {
		t := float64(r.Offline.TimeoutMS)
		beyond.P50, beyond.P99, beyond.P999, beyond.Max, beyond.Mean = beyond.P50-t, beyond.P99-t, beyond.P999-t, beyond.Max-t, beyond.Mean-t
	}
	r.Offline.Beyond = beyond
	if cs := r.Server.CPUCoreSeconds; cs != nil && r.Heartbeats.Sent > 0 {
		us := *cs / float64(r.Heartbeats.Sent) * 1e6
		r.Server.CPUPerHeartbeatUS = &us
	}
	if b := r.Gossip.Bytes; b != nil && r.StatusChanges.OK > 0 {
		pc := *b / float64(r.StatusChanges.OK)
		r.Gossip.PerChange = &pc
	}
	r.Timeline = nil
	for i := range r.seconds {
		s := &r.seconds[i]
		r.Timeline = append(r.Timeline, TimelinePoint{Second: i, Changes: s.Changes,
			P50: ms(s.Request.Quantile(0.5)), P99: ms(s.Request.Quantile(0.99))})
	}
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	return e.Encode(r)
}

// WriteTable writes the report as an aligned two-column table.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, format string, a ...any) { fmt.Fprintf(tw, "%s\t%s\n", k, fmt.Sprintf(format, a...)) }
	q := func(x Quantiles) string {
		if x.Count == 0 {
			return "no samples"
		}
		return fmt.Sprintf("p50 %.2f  p99 %.2f  p999 %.2f  max %.2f ms  (n=%d)", x.P50, x.P99, x.P999, x.Max, x.Count)
	}
	opt := func(v *float64, format string) string {
		if v == nil {
			return "n/a"
		}
		return fmt.Sprintf(format, *v)
	}
	c := r.Config
	row("run", "%d sessions over %d gateway(s), %s, %d proc(s), %.1fs window", c.Sessions, len(c.Addrs), c.Transport, c.Procs, r.Duration)
	row("sessions", "%d established, %d failed, %d lost during the window", r.Sessions.Established, r.Sessions.Failed, r.Sessions.Lost)
	errs := make([]string, 0, len(r.Sessions.Errors))
	for k := range r.Sessions.Errors {
		errs = append(errs, k)
	}
	sort.Strings(errs)
	for _, k := range errs {
		row("  failure", "%d× %s", r.Sessions.Errors[k], k)
	}
	row("connect", "%s", q(r.Connect))
	row("heartbeats/s", "%.0f sent (every %d ms), %s counted by the servers", r.Heartbeats.PerSec, r.Heartbeats.IntervalMS, opt(r.Heartbeats.ServerPerSec, "%.0f"))
	row("status changes/s", "%.1f (target %.1f; %d errors, %d skipped)", r.StatusChanges.PerSec, r.StatusChanges.Target, r.StatusChanges.Errors, r.StatusChanges.Skipped)
	row("request (status)", "%s", q(r.Request))
	row("propagation", "%s", q(r.Propagation))
	row("subscribers", "%d subscribed, watching %d users", r.Subscribers.Subscribed, r.Subscribers.Watched)
	if p := r.Probe; p != nil {
		row("probe", "%d sessions, %d subscribed, %s priority, %d changes (%d errors)", p.Sessions, p.Subscribed, p.Priority, p.Changes, p.Errors)
		row("  request", "%s", q(p.Request))
		row("  propagation", "%s", q(p.Propagation))
	}
	if r.Offline.Silent > 0 || c.Silent > 0 {
		row("offline detection", "%d/%d detected; %s", r.Offline.Detected, r.Offline.Silent, q(r.Offline.Detection))
		row("  beyond timeout", "server timeout %d ms; %s", r.Offline.TimeoutMS, q(r.Offline.Beyond))
	}
	s := r.Server
	if len(s.PIDs) == 0 {
		row("server", "no process found (give --pids)")
	} else {
		row("server pids", "%s", strings.Trim(fmt.Sprint(s.PIDs), "[]"))
		row("server cpu", "%s core-seconds, %s µs per heartbeat", opt(s.CPUCoreSeconds, "%.2f"), opt(s.CPUPerHeartbeatUS, "%.1f"))
		row("server rss", "%.1f MiB before, %.1f MiB after connect, %.1f MiB at end; %.0f bytes per session",
			mib(s.RSSBeforeBytes), mib(s.RSSAfterConnectBytes), mib(s.RSSEndBytes), s.RSSPerSessionBytes)
	}
	row("gossip", "%s bytes sent, %s per change", opt(r.Gossip.Bytes, "%.0f"), opt(r.Gossip.PerChange, "%.0f"))
	return tw.Flush()
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }
