package calibrate

import (
	"context"
	"testing"
	"time"

	"github.com/rollcall/rollcall/sim"
)

// A latency fitted to a heavily loaded real cluster (hop median 1.5s, a
// long lognormal tail) still lets every simulated change reach every live
// node: the simulation runs until deliveries in flight have arrived, as the
// real run waits for them, so the converged fraction does not depend on how
// loaded the machine was when the latency was measured.
func TestSimConvergesUnderAFittedSlowLatency(t *testing.T) {
	sc := Scenario{Nodes: 12, EagerThreshold: 64, Changes: 40, Window: 2 * time.Second,
		Settle: 2 * time.Second, Observe: 2 * time.Second, Crashes: 1, Seed: 3,
		Latency: sim.Latency{Kind: sim.LatencyLognormal, Min: 1480 * time.Millisecond, Sigma: 0.84}}
	for seed := uint64(3); seed < 8; seed++ {
		cfg := SimConfig(sc)
		cfg.Seed = seed
		r, err := sim.Run(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if r.ConvergedFraction != 1 {
			t.Errorf("seed %d: converged fraction %v (%d changes never reached every live node)", seed, r.ConvergedFraction, r.Unconverged)
		}
	}
}
