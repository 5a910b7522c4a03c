package calibrate

import (
	"math"
	"sort"
	"time"

	"github.com/rollcall/rollcall/sim"
)

// warmDelays is what the warm-up measured (see Run).
type warmDelays struct {
	// hops are per write: each receiver's delay (ns) from the write to its
	// replica change (in epidemic mode, the three fastest: the seeds); a
	// warm-up write, alone, waits for no write window.
	hops [][]float64
	// writes are the writes split at the owner's first packet.
	writes []sim.WriteDelay
}

// fitLognormal fits the simulator's lognormal latency to hop delays (ns),
// grouped by write: the median of all of them, and the spread of the logs
// within a write (pooled). The spread between writes is left out on
// purpose: it is one owner's timer and scheduling delay, shared by all the
// receivers of a write, which independent per-packet delays cannot
// represent (fitting it would make the slowest of N receivers far too slow).
func fitLognormal(groups [][]float64) sim.Latency {
	var all []float64
	var ss float64
	n := 0
	for _, g := range groups {
		if len(g) == 0 {
			continue
		}
		var mean float64
		for _, x := range g {
			mean += math.Log(math.Max(x, 1000)) / float64(len(g))
		}
		for _, x := range g {
			d := math.Log(math.Max(x, 1000)) - mean
			ss += d * d
			n++
		}
		all = append(all, g...)
	}
	if len(all) == 0 {
		return sim.Latency{Kind: sim.LatencyFixed, Min: 50 * time.Microsecond}
	}
	sort.Float64s(all)
	med := math.Max(all[len(all)/2], 1000)
	sigma := 0.0
	if n > 1 {
		sigma = math.Min(math.Sqrt(ss/float64(n-1)), 5)
	}
	return sim.Latency{Kind: sim.LatencyLognormal, Min: time.Duration(med), Sigma: sigma}
}
