// Package metrics exports a gateway's counters as Prometheus metrics: the
// node's (NewNodeCollector), the cluster layer's (NewClusterCollector),
// memberlist's own go-metrics (InstallMemberlistSink), and the Go runtime's
// and process's. Every metric is named rollcall_* with its unit in its
// name, and every label takes its values from a closed set (request ops,
// error codes, reasons, message types, member states): never a user,
// device or group name, so series stay few and no name a client chose
// reaches the monitoring system.
//
// The collectors read the counters the node and the cluster keep anyway
// (atomics bumped where things happen) when Prometheus scrapes: nothing
// is added to the request paths. Everything registers on a registry the
// caller passes in; the package keeps no state of its own.
//
// Wiring, as the agent does it:
//
//	reg := prometheus.NewRegistry()
//	metrics.InstallMemberlistSink(reg) // before gossip.New: memberlist reports through go-metrics' global
//	metrics.RegisterProcess(reg)
//	reg.MustRegister(metrics.NewNodeCollector(n))
//	reg.MustRegister(metrics.NewClusterCollector(c))
//	node.Config.HTTPHandlers["GET /metrics"] = metrics.Handler(reg)
package metrics

import (
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Namespace prefixes every metric this package defines.
const Namespace = "rollcall"

// Handler serves the metrics gathered from reg in Prometheus' text (or,
// when asked, OpenMetrics) format: the GET /metrics route. A collector that
// fails is reported in the response and the rest are still served. reg's
// own promhttp_* metrics count the scrapes.
func Handler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorHandling:     promhttp.ContinueOnError,
		Registry:          reg,
		EnableOpenMetrics: true,
	})
}

// RegisterProcess registers the Go runtime's metrics (go_*: goroutines, GC,
// memory) and the process's (process_*: CPU, resident memory, open file
// descriptors, where the platform has them) on reg.
func RegisterProcess(reg prometheus.Registerer) error {
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		return fmt.Errorf("metrics: register Go collector: %w", err)
	}
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return fmt.Errorf("metrics: register process collector: %w", err)
	}
	return nil
}

// metricDef is one metric of a collector of snapshots of type T: its
// descriptor, and how to read its samples out of a snapshot.
type metricDef[T any] struct {
	name   string // without the namespace
	help   string
	typ    prometheus.ValueType
	labels []string
	// collect emits every sample of the metric in s: its value and its
	// label values, in labels' order.
	collect func(s *T, emit func(v float64, labelValues ...string))
}

// snapshotCollector is a prometheus.Collector that takes one snapshot per
// scrape and turns it into const metrics.
type snapshotCollector[T any] struct {
	snapshot func() T
	defs     []metricDef[T]
	descs    []*prometheus.Desc
	// extra emits metrics the table cannot express (histograms).
	extraDescs []*prometheus.Desc
	extra      func(s *T, ch chan<- prometheus.Metric)
}

func newSnapshotCollector[T any](snapshot func() T, defs []metricDef[T]) *snapshotCollector[T] {
	c := &snapshotCollector[T]{snapshot: snapshot, defs: defs}
	for _, d := range defs {
		c.descs = append(c.descs, prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", d.name), d.help, d.labels, nil))
	}
	return c
}

// Describe implements prometheus.Collector.
func (c *snapshotCollector[T]) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
	for _, d := range c.extraDescs {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *snapshotCollector[T]) Collect(ch chan<- prometheus.Metric) {
	s := c.snapshot()
	for i, d := range c.defs {
		desc := c.descs[i]
		d.collect(&s, func(v float64, lv ...string) {
			ch <- prometheus.MustNewConstMetric(desc, d.typ, v, lv...)
		})
	}
	if c.extra != nil {
		c.extra(&s, ch)
	}
}

// counter and gauge build the definitions of unlabelled metrics.
func counter[T any](name, help string, v func(s *T) uint64) metricDef[T] {
	return metricDef[T]{name: name, help: help, typ: prometheus.CounterValue,
		collect: func(s *T, emit func(float64, ...string)) { emit(float64(v(s))) }}
}

func gauge[T any](name, help string, v func(s *T) float64) metricDef[T] {
	return metricDef[T]{name: name, help: help, typ: prometheus.GaugeValue,
		collect: func(s *T, emit func(float64, ...string)) { emit(v(s)) }}
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
