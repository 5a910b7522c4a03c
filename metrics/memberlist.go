package metrics

import (
	"fmt"
	"strings"
	"time"
	"unicode"

	gometrics "github.com/hashicorp/go-metrics"
	gmprom "github.com/hashicorp/go-metrics/prometheus"
	"github.com/prometheus/client_golang/prometheus"
)

// memberlist (v0.7.0) reports its own metrics through go-metrics'
// package-level functions (metrics.IncrCounterWithLabels and the like),
// which forward to go-metrics' global sink; it takes no sink of its own.
// InstallMemberlistSink points that global sink at a registry, through a
// sink that renames memberlist's keys to Prometheus conventions.

// memberlistMetric is how one of memberlist's go-metrics keys is exported.
type memberlistMetric struct {
	name string // the Prometheus name; empty drops the metric
	help string
}

// memberlistMetrics maps memberlist's keys (joined with dots) to their
// exported names. Timers are in seconds (the sink's go-metrics instance
// measures in seconds). Keys not listed are exported under a name derived
// from the key (see memberlistSink.rename).
func memberlistMetrics() map[string]memberlistMetric {
	return map[string]memberlistMetric{
		// Exported from Memberlist.GetHealthScore per cluster instead
		// (rollcall_memberlist_health_score): the global sink would mix
		// the clusters of one process.
		"memberlist.health.score": {},

		"memberlist.node.instances": {"rollcall_memberlist_members",
			"Members in memberlist's own view, by node_state (alive, suspect, dead, left); updated at each push/pull."},
		"memberlist.msg.alive":   {"rollcall_memberlist_alive_messages_total", "Alive messages memberlist processed."},
		"memberlist.msg.suspect": {"rollcall_memberlist_suspect_messages_total", "Suspect messages memberlist processed."},
		"memberlist.msg.dead":    {"rollcall_memberlist_dead_messages_total", "Dead messages memberlist processed."},
		"memberlist.degraded.probe": {"rollcall_memberlist_degraded_probes_total",
			"Probes that completed but above the expected time (this node or the network is slow)."},
		"memberlist.degraded.timeout": {"rollcall_memberlist_degraded_timeouts_total",
			"Probes that timed out waiting for the indirect acks they expected (this node is slow or cut off)."},
		"memberlist.probeNode":    {"rollcall_memberlist_probe_seconds", "Time memberlist took to probe one member."},
		"memberlist.gossip":       {"rollcall_memberlist_gossip_seconds", "Time memberlist took for one gossip round."},
		"memberlist.pushPullNode": {"rollcall_memberlist_pushpull_seconds", "Time memberlist took for one push/pull exchange."},
		"memberlist.queue.broadcasts": {"rollcall_memberlist_broadcast_queue_messages",
			"Messages in memberlist's own broadcast queue (member alive/suspect/dead), sampled periodically."},
		"memberlist.size.local": {"rollcall_memberlist_pushpull_local_state_bytes",
			"Size of the local state this node sends in a push/pull."},
		"memberlist.size.remote": {"rollcall_memberlist_pushpull_remote_state_bytes",
			"Size of the remote state received in a push/pull."},
		"memberlist.udp.sent":     {"rollcall_memberlist_udp_sent_bytes_total", "Bytes memberlist sent over UDP."},
		"memberlist.udp.received": {"rollcall_memberlist_udp_received_bytes_total", "Bytes memberlist received over UDP."},
		"memberlist.tcp.sent":     {"rollcall_memberlist_tcp_sent_bytes_total", "Bytes memberlist sent over TCP."},
		"memberlist.tcp.accept":   {"rollcall_memberlist_tcp_accepts_total", "TCP connections memberlist accepted."},
		"memberlist.tcp.connect":  {"rollcall_memberlist_tcp_connects_total", "TCP connections memberlist opened."},
	}
}

// InstallMemberlistSink makes go-metrics report into reg, with
// memberlist's metrics renamed to rollcall_memberlist_* (counters ending in
// _total, timers in _seconds, sizes in _bytes). It replaces go-metrics'
// global sink, which is process-wide: call it once per process, before
// memberlist starts (gossip.New); with several clusters in one process,
// their memberlist metrics add up in the one sink. It returns the
// go-metrics instance now global.
func InstallMemberlistSink(reg prometheus.Registerer) (*gometrics.Metrics, error) {
	sink, err := NewMemberlistSink(reg)
	if err != nil {
		return nil, err
	}
	cfg := gometrics.DefaultConfig("")
	cfg.EnableHostname = false       // no host name in metric names: Prometheus labels its targets
	cfg.EnableRuntimeMetrics = false // collectors.NewGoCollector reports the runtime
	cfg.TimerGranularity = time.Second
	m, err := gometrics.NewGlobal(cfg, sink)
	if err != nil {
		return nil, fmt.Errorf("metrics: install go-metrics sink: %w", err)
	}
	return m, nil
}

// NewMemberlistSink returns a go-metrics sink that exports into reg under
// Prometheus names (see InstallMemberlistSink). memberlist's known metrics
// are declared up front, so they are served (at zero) before they first
// change, and none expires.
func NewMemberlistSink(reg prometheus.Registerer) (gometrics.MetricSink, error) {
	known := memberlistMetrics()
	opts := gmprom.PrometheusOpts{Registerer: reg, Name: "rollcall_memberlist_sink"}
	for _, m := range known {
		switch {
		case m.name == "":
		case strings.HasSuffix(m.name, "_total"):
			opts.CounterDefinitions = append(opts.CounterDefinitions, gmprom.CounterDefinition{Name: []string{m.name}, Help: m.help})
		case strings.HasSuffix(m.name, "_seconds"), m.name == "rollcall_memberlist_broadcast_queue_messages",
			m.name == "rollcall_memberlist_pushpull_remote_state_bytes":
			opts.SummaryDefinitions = append(opts.SummaryDefinitions, gmprom.SummaryDefinition{Name: []string{m.name}, Help: m.help})
		case m.name == "rollcall_memberlist_members":
			for _, st := range []string{"alive", "suspect", "dead", "left"} {
				opts.GaugeDefinitions = append(opts.GaugeDefinitions, gmprom.GaugeDefinition{Name: []string{m.name}, Help: m.help,
					ConstLabels: []gometrics.Label{{Name: "node_state", Value: st}}})
			}
		default:
			opts.GaugeDefinitions = append(opts.GaugeDefinitions, gmprom.GaugeDefinition{Name: []string{m.name}, Help: m.help})
		}
	}
	ps, err := gmprom.NewPrometheusSinkFrom(opts)
	if err != nil {
		return nil, fmt.Errorf("metrics: memberlist sink: %w", err)
	}
	return &memberlistSink{ps: ps, known: known}, nil
}

// memberlistSink renames go-metrics keys and forwards them to a go-metrics
// Prometheus sink.
type memberlistSink struct {
	ps    *gmprom.PrometheusSink
	known map[string]memberlistMetric // static after construction
}

var (
	_ gometrics.MetricSink               = (*memberlistSink)(nil)
	_ gometrics.PrecisionGaugeMetricSink = (*memberlistSink)(nil)
)

// rename returns the Prometheus name of a go-metrics key, as the single
// key part the Prometheus sink expects, or nil to drop it. A key not in
// memberlistMetrics becomes rollcall_ and its parts in snake case, plus
// suffix (_total for counters).
func (s *memberlistSink) rename(key []string, suffix string) []string {
	if m, ok := s.known[strings.Join(key, ".")]; ok {
		if m.name == "" {
			return nil
		}
		return []string{m.name}
	}
	parts := make([]string, 0, len(key)+1)
	parts = append(parts, Namespace)
	for _, k := range key {
		parts = append(parts, snakeCase(k))
	}
	return []string{strings.Join(parts, "_") + suffix}
}

// snakeCase turns "pushPullNode" into "push_pull_node" and any character
// not allowed in a metric name into "_".
func snakeCase(s string) string {
	var b strings.Builder
	for i, r := range s {
		switch {
		case unicode.IsUpper(r):
			if i > 0 {
				b.WriteByte('_')
			}
			b.WriteRune(unicode.ToLower(r))
		case r < 128 && (unicode.IsLetter(r) || unicode.IsDigit(r)):
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	return b.String()
}

func (s *memberlistSink) SetGauge(key []string, val float32) { s.SetGaugeWithLabels(key, val, nil) }

func (s *memberlistSink) SetGaugeWithLabels(key []string, val float32, labels []gometrics.Label) {
	s.SetPrecisionGaugeWithLabels(key, float64(val), labels)
}

func (s *memberlistSink) SetPrecisionGauge(key []string, val float64) {
	s.SetPrecisionGaugeWithLabels(key, val, nil)
}

func (s *memberlistSink) SetPrecisionGaugeWithLabels(key []string, val float64, labels []gometrics.Label) {
	if k := s.rename(key, ""); k != nil {
		s.ps.SetPrecisionGaugeWithLabels(k, val, labels)
	}
}

// EmitKey is dropped, as the Prometheus sink does.
func (s *memberlistSink) EmitKey([]string, float32) {}

func (s *memberlistSink) IncrCounter(key []string, val float32) {
	s.IncrCounterWithLabels(key, val, nil)
}

func (s *memberlistSink) IncrCounterWithLabels(key []string, val float32, labels []gometrics.Label) {
	if k := s.rename(key, "_total"); k != nil {
		s.ps.IncrCounterWithLabels(k, val, labels)
	}
}

func (s *memberlistSink) AddSample(key []string, val float32) { s.AddSampleWithLabels(key, val, nil) }

func (s *memberlistSink) AddSampleWithLabels(key []string, val float32, labels []gometrics.Label) {
	if k := s.rename(key, ""); k != nil {
		s.ps.AddSampleWithLabels(k, val, labels)
	}
}
