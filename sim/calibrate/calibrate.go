// Package calibrate checks the simulator against reality: it runs one
// scenario on a real in-process cluster (real memberlist nodes on loopback,
// gossip.New over gossip.ReplicaHost, the production code paths) and in the
// simulator, and reports both side by side.
//
// It is a measurement, not a unit test: it opens sockets, sleeps, and its
// real-cluster numbers depend on the machine's load. Its command line,
// `rollcall sim calibrate`, is sim/simcli's Calibrate; this package parses no
// flags and draws nothing.
package calibrate

import (
	"context"

	"github.com/rollcall/rollcall/sim"
)

// Measure is what each side reports.
type Measure struct {
	ConvP50, ConvP99 float64 // ms, per change, to every live node
	CopiesPerChange  float64 // delta copies in packets per change
	CrashP50         float64 // ms, crash to offline, per (crash, survivor)
	CrashMax         float64
	Converged        float64 // fraction of changes that reached every node
	// Curve is the fraction of (change, node) pairs converged against the
	// time since the change (the simulator's first seed, or the real run).
	Curve []sim.CurvePoint
	// IndependentP50 and IndependentP99 are the simulator's convergence
	// without the measured write delays (sim only, with Scenario.Host):
	// what independent per-packet delays make of the same host.
	IndependentP50, IndependentP99 float64

	// conv and crash are the real cluster's samples (ms, sorted): each
	// converged change's convergence time and each crash detection, for
	// pooling runs (Pooled).
	conv, crash []float64
	// ran is the scenario this side actually ran.
	ran ran
	// audit is the real cluster's copy audit, taken before the crashes.
	audit copyAudit
	// directCopies is the simulator's copies per change sent directly by
	// the owners (sim.Result.DirectCopiesPerChange, mean over seeds).
	directCopies float64
}

// ran is what one side ran: its node count, dissemination mode, the
// scenario writes it made (not the warm-up's), and the nodes it crashed, in
// order.
type ran struct {
	nodes, writes int
	mode          string
	crashed       []int
}

// Report is a calibration result.
type Report struct {
	Scenario  Scenario
	LatencyUS float64 // one-way latency given to the simulator
	// WriteDelays are the measured writes given to the simulator (with
	// Scenario.Host).
	WriteDelays []sim.WriteDelay
	Real, Sim   Measure
}

// Run runs the scenario on a real cluster, then in the simulator.
//
// The simulator has no model of CPU time, and an in-process cluster of
// dozens of nodes on a small machine spends more time waiting for a core
// than on the loopback wire (its shared garbage collector is taken out of
// the way: separateHeaps). So the real cluster measures its own delays:
// Warmup single writes at random, WarmupSpacing apart on average, half
// before the scenario and half after it, each split at its owner's first
// packet, which the transport timestamps as it sends it: the flush delay,
// from the write to that packet (a write alone waits for no write
// window), and each receiver's hop
// delay, from that packet to the receiver's replica change.
//
// Unless sc.Latency is set, a lognormal fitted to each receiver's delay
// from the write (the median, and the spread within a write), is the
// simulator's latency for every packet.
// That leaves out what one write's receivers share, and the tail of
// eager convergence is exactly that: on a shared host the slow writes are
// slow at most of their receivers at once (a stall of the whole host: its
// cores taken by other processes, a GC cycle), not at one receiver by
// chance. With sc.Host, the measured writes themselves are the simulator's
// Config.WriteDelays: each flush replays one write's flush delay and its
// receivers' hop delays, together. In epidemic mode only the flush delay
// is used: a write's later receivers got it from relays, not from the
// owner, so their delays are not one hop's.
//
// The scenario itself (fan-out, batching, piggybacking, retransmit limits,
// failure detection) is then compared; nothing measured on the scenario's
// own writes sets the simulator.
func Run(ctx context.Context, sc Scenario) (*Report, error) {
	reports, err := RunPooled(ctx, sc, 1, nil)
	if err != nil {
		return nil, err
	}
	return reports[0], nil
}

// RunPooled runs the scenario runs times on the real cluster, with seeds
// sc.Seed, sc.Seed+1, ..., and then each of them in the simulator, which
// gets the warm-up writes of all the runs together: the host's stalls,
// which a single warm-up of Warmup writes samples as thinly as the
// scenario does, are then measured over all of them, as Pooled measures
// the real side. progress, if set, is called before each real run.
func RunPooled(ctx context.Context, sc Scenario, runs int, progress func(run int, seed uint64)) ([]*Report, error) {
	sc = sc.withDefaults()
	scs := make([]Scenario, runs)
	reals := make([]*Measure, runs)
	var all warmDelays
	for i := range runs {
		scs[i] = sc
		scs[i].Seed = sc.Seed + uint64(i)
		if progress != nil {
			progress(i, scs[i].Seed)
		}
		real, warm, err := runReal(ctx, scs[i])
		if err != nil {
			return nil, err
		}
		reals[i] = real
		all.hops = append(all.hops, warm.hops...)
		all.writes = append(all.writes, warm.writes...)
	}
	reports := make([]*Report, runs)
	for i := range runs {
		r, err := compare(ctx, scs[i], reals[i], &all)
		if err != nil {
			return nil, err
		}
		reports[i] = r
	}
	return reports, nil
}

// compare runs the scenario in the simulator, set from what the real
// cluster's warm-up measured, and reports it beside the real measure.
func compare(ctx context.Context, sc Scenario, real *Measure, warm *warmDelays) (*Report, error) {
	if sc.Latency.Kind == sim.LatencyUnset {
		sc.Latency = fitLognormal(warm.hops)
	}
	var writes []sim.WriteDelay
	if sc.Host {
		writes = warm.writes
	}
	simm, err := runSim(ctx, sc, writes)
	if err != nil {
		return nil, err
	}
	if sc.Host {
		ind, err := runSim(ctx, sc, nil)
		if err != nil {
			return nil, err
		}
		simm.IndependentP50, simm.IndependentP99 = ind.ConvP50, ind.ConvP99
	}
	return &Report{Scenario: sc, LatencyUS: float64(sc.Latency.Min) / 1e3, WriteDelays: writes, Real: *real, Sim: *simm}, nil
}
