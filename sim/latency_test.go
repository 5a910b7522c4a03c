package sim

import (
	"testing"
	"time"
)

func TestParseLatency(t *testing.T) {
	for in, want := range map[string]Latency{
		"1ms":               {Kind: LatencyFixed, Min: time.Millisecond},
		"1ms..5ms":          {Kind: LatencyUniform, Min: time.Millisecond, Max: 5 * time.Millisecond},
		"normal:2ms,500us":  {Kind: LatencyNormal, Min: 2 * time.Millisecond, Max: 500 * time.Microsecond},
		"lognormal:2ms,0.5": {Kind: LatencyLognormal, Min: 2 * time.Millisecond, Sigma: 0.5},
	} {
		got, err := ParseLatency(in)
		if err != nil || got != want {
			t.Errorf("ParseLatency(%q) = %+v, %v; want %+v", in, got, err, want)
		}
		if back, _ := ParseLatency(got.String()); back != got {
			t.Errorf("%q does not round-trip: %q", in, got.String())
		}
	}
	for _, bad := range []string{"", "fast", "5ms..1ms", "-1ms", "lognormal:0s,1", "lognormal:1ms", "normal:1ms"} {
		if _, err := ParseLatency(bad); err == nil {
			t.Errorf("ParseLatency(%q) accepted", bad)
		}
	}
}
