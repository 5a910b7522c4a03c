package sim

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

// hostConfig is an eager cluster on a fast network (100µs per packet) whose
// owners replay one measured write: flushed 3ms late, and delivered in 1ms
// to every receiver but one, which takes 20ms.
func hostConfig() Config {
	c := small()
	c.Nodes = 16
	c.Churn = Churn{Connect: 1, Status: 1}
	c.Latency = Latency{Kind: LatencyFixed, Min: 100 * time.Microsecond}
	hops := make([]time.Duration, 15)
	for i := range hops {
		hops[i] = time.Millisecond
	}
	hops[7] = 20 * time.Millisecond
	c.WriteDelays = []WriteDelay{{Flush: 3 * time.Millisecond, Hops: hops}}
	return c
}

// A measured write's delays time an eager flush together: the flush waits
// the write's flush delay (an isolated write does not wait for a window),
// and its slowest receiver gets the write's slowest hop, every time (a
// random draw per packet would miss it more often than not), so every
// change converges in exactly 3ms + 20ms.
func TestWriteDelaysTimeTheEagerFanOut(t *testing.T) {
	r := run(t, hostConfig())
	if r.Mode != "eager" || r.ConvergedFraction != 1 {
		t.Fatalf("mode %s, converged %v", r.Mode, r.ConvergedFraction)
	}
	for name, got := range map[string]float64{"p50": r.Convergence.P50, "p99": r.Convergence.P99, "max": r.Convergence.Max} {
		if got < 22.9 || got > 23.1 {
			t.Errorf("convergence %s %.3fms, want 23ms (flush 3ms + slowest hop 20ms)", name, got)
		}
	}
	// Without them the same cluster converges in one packet.
	cfg := hostConfig()
	cfg.WriteDelays = nil
	if r := run(t, cfg); r.Convergence.Max > 0.2 {
		t.Errorf("without write delays: convergence max %.3fms, want 0.1ms", r.Convergence.Max)
	}
}

// Write delays keep the simulator deterministic.
func TestWriteDelaysDeterministic(t *testing.T) {
	cfg := hostConfig()
	cfg.WriteDelays = append(cfg.WriteDelays, WriteDelay{Flush: 0, Hops: []time.Duration{time.Millisecond, 5 * time.Millisecond}})
	encode := func() []byte {
		b, err := json.Marshal(run(t, cfg))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if a, b := encode(), encode(); !bytes.Equal(a, b) {
		t.Fatalf("same seed, different output:\n%s\n%s", a, b)
	}
}

func TestWriteDelaysValidate(t *testing.T) {
	for _, w := range []WriteDelay{{Flush: -time.Millisecond}, {Hops: []time.Duration{time.Millisecond, -1}}} {
		cfg := small()
		cfg.WriteDelays = []WriteDelay{w}
		if err := cfg.Validate(); err == nil {
			t.Errorf("%+v: accepted a negative delay", w)
		}
	}
}
