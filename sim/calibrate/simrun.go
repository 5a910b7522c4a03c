package calibrate

import (
	"context"

	"github.com/rollcall/rollcall/sim"
)

// runSim runs the scenario in the simulator (SimConfig), with writes as its
// write delays, over several seeds, and averages what they measure.
func runSim(ctx context.Context, sc Scenario, writes []sim.WriteDelay) (*Measure, error) {
	// Several seeds, pooled by averaging: one seed has one crash.
	const seeds = 5
	var m Measure
	for i := range seeds {
		cfg := SimConfig(sc)
		cfg.WriteDelays = writes
		cfg.Seed = sc.Seed + uint64(i)
		r, err := sim.Run(ctx, cfg)
		if err != nil {
			return nil, err
		}
		m.ConvP50 += r.Convergence.P50 / seeds
		m.ConvP99 += r.Convergence.P99 / seeds
		m.CopiesPerChange += r.CopiesPerChange / seeds
		m.CrashP50 += r.NodeCrash.P50 / seeds
		m.CrashMax += r.NodeCrash.Max / seeds
		m.Converged += r.ConvergedFraction / seeds
		m.directCopies += r.DirectCopiesPerChange / seeds
		if i == 0 {
			m.Curve = r.Curve
			m.ran = ran{nodes: r.Nodes, writes: r.Actions, mode: r.Mode}
			for _, c := range cfg.Crashes {
				m.ran.crashed = append(m.ran.crashed, c.Node)
			}
		}
	}
	return &m, nil
}
