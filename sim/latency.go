package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// LatencyKind names a one-way latency distribution.
type LatencyKind uint8

const (
	// LatencyUnset is the zero value: Validate replaces it by the default.
	LatencyUnset LatencyKind = iota
	// LatencyFixed is always Min.
	LatencyFixed
	// LatencyUniform is uniform in [Min, Max].
	LatencyUniform
	// LatencyNormal is normal with mean Min and standard deviation Sigma
	// (a duration), truncated at zero.
	LatencyNormal
	// LatencyLognormal has median Min and shape Sigma (the standard
	// deviation of the log): a long right tail, as on real networks.
	LatencyLognormal
)

// String names the kind.
func (k LatencyKind) String() string {
	switch k {
	case LatencyUnset:
		return "unset"
	case LatencyFixed:
		return "fixed"
	case LatencyUniform:
		return "uniform"
	case LatencyNormal:
		return "normal"
	case LatencyLognormal:
		return "lognormal"
	}
	return fmt.Sprintf("latency(%d)", uint8(k))
}

// Latency is a one-way network delay distribution.
type Latency struct {
	Kind     LatencyKind
	Min, Max time.Duration // fixed: Min; uniform: [Min, Max]; normal: mean Min, sd Max; lognormal: median Min
	Sigma    float64       // lognormal shape
}

// ParseLatency parses a latency flag:
//
//	1ms                fixed
//	1ms..5ms           uniform between the two
//	normal:2ms,500us   normal with mean 2ms and standard deviation 500us
//	lognormal:2ms,0.5  lognormal with median 2ms and log-sd 0.5
func ParseLatency(s string) (Latency, error) {
	s = strings.TrimSpace(s)
	bad := func(err error) (Latency, error) {
		return Latency{}, fmt.Errorf("latency %q: %w (want 1ms, 1ms..5ms, normal:2ms,500us or lognormal:2ms,0.5)", s, err)
	}
	switch {
	case strings.HasPrefix(s, "lognormal:"):
		a, b, ok := strings.Cut(strings.TrimPrefix(s, "lognormal:"), ",")
		if !ok {
			return bad(fmt.Errorf("missing shape"))
		}
		med, err := time.ParseDuration(a)
		if err != nil {
			return bad(err)
		}
		sigma, err := strconv.ParseFloat(b, 64)
		if err != nil {
			return bad(err)
		}
		l := Latency{Kind: LatencyLognormal, Min: med, Sigma: sigma}
		return l, l.Validate()
	case strings.HasPrefix(s, "normal:"):
		a, b, ok := strings.Cut(strings.TrimPrefix(s, "normal:"), ",")
		if !ok {
			return bad(fmt.Errorf("missing standard deviation"))
		}
		mean, err := time.ParseDuration(a)
		if err != nil {
			return bad(err)
		}
		sd, err := time.ParseDuration(b)
		if err != nil {
			return bad(err)
		}
		l := Latency{Kind: LatencyNormal, Min: mean, Max: sd}
		return l, l.Validate()
	case strings.Contains(s, ".."):
		a, b, _ := strings.Cut(s, "..")
		lo, err := time.ParseDuration(a)
		if err != nil {
			return bad(err)
		}
		hi, err := time.ParseDuration(b)
		if err != nil {
			return bad(err)
		}
		l := Latency{Kind: LatencyUniform, Min: lo, Max: hi}
		return l, l.Validate()
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return bad(err)
	}
	l := Latency{Kind: LatencyFixed, Min: d}
	return l, l.Validate()
}

// Validate rejects impossible distributions.
func (l Latency) Validate() error {
	switch {
	case l.Min < 0 || l.Max < 0:
		return fmt.Errorf("latency %v: negative duration", l)
	case l.Kind == LatencyUniform && l.Max < l.Min:
		return fmt.Errorf("latency %v: upper bound below lower bound", l)
	case l.Kind == LatencyLognormal && (l.Sigma < 0 || l.Sigma > 5 || l.Min == 0):
		return fmt.Errorf("latency %v: lognormal needs a positive median and shape in [0,5]", l)
	case l.Kind > LatencyLognormal:
		return fmt.Errorf("latency: unknown kind %d", l.Kind)
	}
	return nil
}

// String formats l in ParseLatency's syntax.
func (l Latency) String() string {
	switch l.Kind {
	case LatencyUniform:
		return l.Min.String() + ".." + l.Max.String()
	case LatencyNormal:
		return "normal:" + l.Min.String() + "," + l.Max.String()
	case LatencyLognormal:
		return "lognormal:" + l.Min.String() + "," + strconv.FormatFloat(l.Sigma, 'g', -1, 64)
	}
	return l.Min.String()
}

// Floor returns the smallest delay the distribution can produce.
func (l Latency) Floor() time.Duration {
	switch l.Kind {
	case LatencyFixed, LatencyUniform:
		return l.Min
	}
	return 0
}

// Mean returns the distribution's mean.
func (l Latency) Mean() time.Duration {
	switch l.Kind {
	case LatencyUniform:
		return (l.Min + l.Max) / 2
	case LatencyLognormal:
		return time.Duration(float64(l.Min) * math.Exp(l.Sigma*l.Sigma/2))
	}
	return l.Min
}

// sample draws one delay in nanoseconds.
func (l Latency) sample(r *rand.Rand) int64 {
	switch l.Kind {
	case LatencyUniform:
		if l.Max == l.Min {
			return int64(l.Min)
		}
		return int64(l.Min) + r.Int64N(int64(l.Max-l.Min)+1)
	case LatencyNormal:
		return max(0, int64(float64(l.Min)+r.NormFloat64()*float64(l.Max)))
	case LatencyLognormal:
		return int64(float64(l.Min) * math.Exp(r.NormFloat64()*l.Sigma))
	}
	return int64(l.Min)
}
