package sim

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/rollcall/rollcall/dissem"
)

// Result is what one run measured. Its JSON keys are the `rollcall sim
// --format json` output; times are in milliseconds unless a key says
// otherwise, rates are per node per simulated second.
type Result struct {
	Nodes      int     `json:"nodes"`
	Profile    string  `json:"profile"`
	Mode       string  `json:"mode"` // eager, epidemic or tree (dissem.Node.Mode)
	Fanout     int     `json:"fanout"`
	IntervalMS float64 `json:"interval_ms"`
	Loss       float64 `json:"loss"`
	Latency    string  `json:"latency"`
	DurationS  float64 `json:"duration_s"`
	TimeoutS   float64 `json:"timeout_s"`
	Seed       uint64  `json:"seed"`

	// Actions is the number of client actions; Changes the owner writes
	// they caused (expiries included).
	Actions int `json:"actions"`
	Changes int `json:"changes"`

	// Convergence is, per change, the time until every live node had it.
	Convergence Percentiles `json:"convergence_ms"`
	// NodeConvergence is, per (change, node), the time until that node had
	// it: how fast the typical node learns.
	NodeConvergence Percentiles `json:"node_convergence_ms"`
	// ConvergedFraction is the fraction of changes that reached every live
	// node by the end of the run.
	ConvergedFraction float64 `json:"converged_fraction"`
	Unconverged       int     `json:"unconverged"`

	BytesPerNodePerS    float64 `json:"bytes_per_node_per_s"`
	MessagesPerNodePerS float64 `json:"messages_per_node_per_s"`
	// CopiesPerChange is delta copies sent per change: direct sends,
	// piggybacked retransmissions and relays (anti-entropy excluded).
	CopiesPerChange float64 `json:"copies_per_change"`
	// DirectCopiesPerChange counts only the copies sent point to point (an
	// owner's sends and seeds, tree relays; not piggybacked ones), as
	// gossip's Stats.DeltaCopies does.
	DirectCopiesPerChange float64 `json:"direct_copies_per_change"`

	// OfflineDetection pools silent client failures and gateway crashes.
	OfflineDetection Detection `json:"offline_detection_ms"`
	ClientFailure    Detection `json:"client_failure_offline_ms"`
	NodeCrash        Detection `json:"node_crash_offline_ms"`

	// FalseOffline counts (session, node) incidents of a live session shown
	// offline; FalseOfflineS is their total duration in seconds.
	FalseOffline  int     `json:"false_offline"`
	FalseOfflineS float64 `json:"false_offline_s"`
	// GhostMS is the mean time a session whose client is gone is still
	// shown online by a live node, over every such (session, node) pair;
	// GhostMaxMS the longest.
	GhostMS    float64 `json:"ghost_ms"`
	GhostMaxMS float64 `json:"ghost_max_ms"`

	AntiEntropyBytes            uint64  `json:"anti_entropy_bytes"`
	AntiEntropyBytesPerNodePerS float64 `json:"anti_entropy_bytes_per_node_per_s"`

	Counters Counters `json:"counters"`

	// Curve is the fraction of (change, node) pairs converged against the
	// time since the change, at the points where it rises.
	Curve []CurvePoint `json:"curve"`
}

// Percentiles summarises a distribution of times in milliseconds.
type Percentiles struct {
	Min     float64 `json:"min"`
	P50     float64 `json:"p50"`
	P90     float64 `json:"p90"`
	P99     float64 `json:"p99"`
	Max     float64 `json:"max"`
	Samples int     `json:"samples"`
}

// Detection summarises offline-detection delays in milliseconds.
type Detection struct {
	P50     float64 `json:"p50"`
	P99     float64 `json:"p99"`
	Max     float64 `json:"max"`
	Samples int     `json:"samples"`
	// Censored samples were still undetected at the end of the run and
	// count as the time to the end.
	Censored int `json:"censored"`
}

// Counters are raw event totals of the run.
type Counters struct {
	Packets      uint64 `json:"packets"`
	PacketsLost  uint64 `json:"packets_lost"`
	Streams      uint64 `json:"streams"`
	Bytes        uint64 `json:"bytes"`
	DeltaCopies  uint64 `json:"delta_copies"`
	GapPulls     uint64 `json:"gap_pulls"`
	PushPulls    uint64 `json:"push_pulls"`
	SyncRecords  uint64 `json:"sync_records"`
	Suspicions   uint64 `json:"suspicions"`
	Deaths       uint64 `json:"deaths"`
	Refutes      uint64 `json:"refutes"`
	Probes       uint64 `json:"probes"`
	FailedProbes uint64 `json:"failed_probes"`
	QueuePruned  uint64 `json:"queue_pruned"`
	Superseded   uint64 `json:"superseded_writes"`
	AnswersDrop  uint64 `json:"answers_dropped"`
	Events       uint64 `json:"events"`
	ClientsTotal int    `json:"clients"`
}

// CurvePoint is one point of the convergence curve.
type CurvePoint struct {
	MS       float64 `json:"ms"`
	Fraction float64 `json:"fraction"`
}

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }

// percentile is the nearest-rank percentile of sorted xs.
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	i := int(math.Ceil(p/100*float64(len(xs)))) - 1
	return xs[min(max(i, 0), len(xs)-1)]
}

func percentiles(xs []float64) Percentiles {
	xs = slices.Clone(xs)
	slices.Sort(xs)
	p := Percentiles{Samples: len(xs)}
	if len(xs) == 0 {
		return p
	}
	p.Min = round3(xs[0])
	p.P50, p.P90, p.P99 = round3(percentile(xs, 50)), round3(percentile(xs, 90)), round3(percentile(xs, 99))
	p.Max = round3(xs[len(xs)-1])
	return p
}

func detection(xs []float64, censored int) Detection {
	p := percentiles(xs)
	return Detection{P50: p.P50, P99: p.P99, Max: p.Max, Samples: p.Samples, Censored: censored}
}

// result closes the books at the end of the run.
func (s *Sim) result() *Result {
	t := s.track
	// Still-open incidents count to the end.
	for cid, b := range t.shown {
		c := s.clients[cid]
		if c.online {
			continue
		}
		for w, word := range b {
			for word != 0 {
				i := int32(w*64 + trailingZeros(word))
				word &= word - 1
				t.closeGhost(s, c, i, false)
				if t.causes[c.id] == causeFail {
					if m := t.failOff[c.id]; m != nil {
						delete(m, i) // shown online at the end: not detected
					}
					t.clientDet = append(t.clientDet, float64(s.now-c.diedAt)/1e6)
					t.clientCensored++
				}
			}
		}
		t.flushFailures(c)
	}
	for _, cid := range sortedKeys(t.falseOpen) {
		for _, n := range sortedKeys(t.falseOpen[cid]) {
			t.closeFalse(s, cid, n)
		}
	}
	for _, id := range sortedKeys(t.crashes) {
		t.finishCrash(s, t.crashes[id])
	}
	crashCensored := t.censored

	secs := s.cfg.Duration.Seconds()
	perNodeS := float64(s.cfg.Nodes) * secs
	r := &Result{
		Nodes: s.cfg.Nodes, Profile: s.cfg.Profile,
		Mode:   simMode(s.cfg).String(),
		Fanout: s.cfg.GossipNodes, IntervalMS: round3(ms(s.cfg.GossipInterval)), Loss: s.cfg.Loss,
		Latency: s.cfg.Latency.String(), DurationS: secs, TimeoutS: s.cfg.Timeout.Seconds(), Seed: s.cfg.Seed,
		Actions: s.cfg.actions(), Changes: len(s.changes),
	}
	var conv []float64
	for _, ch := range s.changes {
		if ch.done {
			conv = append(conv, float64(ch.lastReach-ch.at)/1e6)
		} else {
			r.Unconverged++
		}
	}
	r.Convergence = percentiles(conv)
	if len(s.changes) > 0 {
		r.ConvergedFraction = round3(float64(len(conv)) / float64(len(s.changes)))
		r.CopiesPerChange = round3(float64(s.stats.deltaCopies) / float64(len(s.changes)))
		r.DirectCopiesPerChange = round3(float64(s.stats.directCopies) / float64(len(s.changes)))
	}
	r.NodeConvergence, r.Curve = s.curve()
	r.BytesPerNodePerS = round3(float64(s.stats.bytes) / perNodeS)
	r.MessagesPerNodePerS = round3(float64(s.stats.packets+s.stats.streams) / perNodeS)
	r.ClientFailure = detection(t.clientDet, t.clientCensored)
	r.NodeCrash = detection(t.crashDet, crashCensored)
	r.OfflineDetection = detection(append(slices.Clone(t.clientDet), t.crashDet...), t.clientCensored+crashCensored)
	r.FalseOffline = t.falseOff.n
	r.FalseOfflineS = round3(t.falseOff.sum / 1e9)
	if t.ghost.n > 0 {
		r.GhostMS = round3(t.ghost.sum / t.ghost.n)
	}
	r.GhostMaxMS = round3(t.ghost.max)
	r.AntiEntropyBytes = s.stats.antiEntropyBytes
	r.AntiEntropyBytesPerNodePerS = round3(float64(s.stats.antiEntropyBytes) / perNodeS)
	r.Counters = Counters{
		Packets: s.stats.packets, PacketsLost: s.stats.lost, Streams: s.stats.streams, Bytes: s.stats.bytes,
		DeltaCopies: s.stats.deltaCopies, GapPulls: s.stats.gapPulls, PushPulls: s.stats.pushPulls,
		SyncRecords: s.stats.syncRecords, Suspicions: s.stats.suspicions, Deaths: s.stats.deaths,
		Refutes: s.stats.refutes, Probes: s.stats.probes, FailedProbes: s.stats.failedProbes, QueuePruned: s.stats.queuePruned, Superseded: s.stats.supersededWrites, AnswersDrop: s.stats.answersDropped,
		Events: s.events, ClientsTotal: len(s.clients),
	}
	return r
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// curve turns the age histogram into node-level percentiles and the
// convergence curve.
func (s *Sim) curve() (Percentiles, []CurvePoint) {
	p := Percentiles{}
	if s.targetsTotal == 0 {
		return p, nil
	}
	total := float64(s.targetsTotal)
	var got uint64
	for _, a := range s.ages {
		got += a
	}
	p.Samples = int(got)
	var out []CurvePoint
	var cum uint64
	marks := []struct {
		q   float64
		dst *float64
	}{{0.5, &p.P50}, {0.9, &p.P90}, {0.99, &p.P99}}
	last := -1.0
	for b, a := range s.ages {
		if a == 0 {
			continue
		}
		cum += a
		upper := binUpper(b) / 1e6
		for _, m := range marks {
			if *m.dst == 0 && float64(cum) >= m.q*float64(got) {
				*m.dst = round3(upper)
			}
		}
		p.Max = round3(upper)
		frac := float64(cum) / total
		if frac-last >= 0.01 || cum == got {
			out = append(out, CurvePoint{MS: round3(upper), Fraction: round3(frac)})
			last = frac
		}
	}
	return p, out
}

// String is a one-line summary.
func (r *Result) String() string {
	return fmt.Sprintf("%d nodes %s: convergence p50 %.1fms p99 %.1fms, converged %.3f, %.0f B/node/s",
		r.Nodes, r.Mode, r.Convergence.P50, r.Convergence.P99, r.ConvergedFraction, r.BytesPerNodePerS)
}

// simMode is the mode a node of a whole cluster of cfg runs in
// (dissem.Node.Mode).
func simMode(cfg Config) dissem.Mode {
	m := dissem.ChooseMode(cfg.Nodes, cfg.EagerThreshold)
	if m == dissem.ModeEpidemic && cfg.Relay == dissem.RelayTree {
		return dissem.ModeTree
	}
	return m
}
