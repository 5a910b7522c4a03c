package bench

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// exactQuantile is the ceil(q*n)-th smallest value.
func exactQuantile(sorted []time.Duration, q float64) time.Duration {
	r := max(int(math.Ceil(q*float64(len(sorted)))), 1)
	return sorted[r-1]
}

func TestBenchHistogramQuantilesWithinPrecision(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, dist := range []struct {
		name string
		gen  func() time.Duration
	}{
		{"uniform-us", func() time.Duration { return time.Duration(r.IntN(1000)) * time.Microsecond }},
		{"lognormal-ms", func() time.Duration { return time.Duration(math.Exp(r.NormFloat64()*1.5) * float64(time.Millisecond)) }},
		{"small-ns", func() time.Duration { return time.Duration(r.IntN(100)) }},
		{"seconds", func() time.Duration { return time.Duration(r.Float64() * 30 * float64(time.Second)) }},
	} {
		var h Histogram
		vals := make([]time.Duration, 20000)
		for i := range vals {
			vals[i] = dist.gen()
			h.Record(vals[i])
		}
		slices.Sort(vals)
		for _, q := range []float64{0, 0.01, 0.5, 0.9, 0.99, 0.999, 1} {
			got, want := h.Quantile(q), exactQuantile(vals, q)
			if tol := float64(want)/float64(subHalf) + 1; math.Abs(float64(got-want)) > tol {
				t.Errorf("%s q=%v: got %v, want %v ± %v", dist.name, q, got, want, time.Duration(tol))
			}
		}
		if h.Count() != uint64(len(vals)) || h.Max() != vals[len(vals)-1] {
			t.Errorf("%s: count %d max %v", dist.name, h.Count(), h.Max())
		}
	}
}

func TestBenchHistogramEdgeValues(t *testing.T) {
	var h Histogram
	if h.Quantile(0.5) != 0 || h.Mean() != 0 || h.Count() != 0 {
		t.Fatal("empty histogram not zero")
	}
	h.Record(-5) // counts as 0
	h.Record(time.Duration(math.MaxInt64))
	if h.Quantile(0) != 0 || h.Quantile(1) != time.Duration(math.MaxInt64) {
		t.Fatalf("extremes: %v %v", h.Quantile(0), h.Quantile(1))
	}
	for v := int64(0); v < 1<<20; v = v*3 + 1 {
		lo, hi := bucketRange(bucketOf(v))
		if v < lo || v > hi {
			t.Fatalf("%d outside its bucket [%d, %d]", v, lo, hi)
		}
	}
}

func TestBenchHistogramMergeAndJSON(t *testing.T) {
	var a, b, all Histogram
	for i := range 1000 {
		d := time.Duration(i*i) * time.Microsecond
		all.Record(d)
		if i%2 == 0 {
			a.Record(d)
		} else {
			b.Record(d)
		}
	}
	a.Merge(&b)
	raw, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	var back Histogram
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	for _, q := range []float64{0.1, 0.5, 0.99} {
		if back.Quantile(q) != all.Quantile(q) {
			t.Errorf("q=%v: merged and decoded %v, direct %v", q, back.Quantile(q), all.Quantile(q))
		}
	}
	if back.Count() != all.Count() || back.Mean() != all.Mean() {
		t.Errorf("count/mean %d %v, want %d %v", back.Count(), back.Mean(), all.Count(), all.Mean())
	}
	c := back.Clone()
	c.Record(time.Hour)
	if back.Count() == c.Count() {
		t.Error("clone shares its counts")
	}
}

func TestBenchHistogramDecodeRefusesBadInput(t *testing.T) {
	for _, in := range []string{
		`[1,2]`,
		`{"b":[[99999999,1]]}`,
		`{"b":[[5,1],[5,1]],"min":5,"max":5}`,
		`{"b":[[6,1],[5,1]],"min":5,"max":6}`,
		`{"b":[[5,0]],"min":5,"max":5}`,
		`{"b":[[5,1]],"min":4,"max":5}`,
		`{"b":[[5,1]],"min":5,"max":5,"sum":-1}`,
		`{"min":3}`,
		`{"b":[[1,18446744073709551615],[2,1]],"min":1,"max":2}`,
	} {
		var h Histogram
		if err := json.Unmarshal([]byte(in), &h); err == nil || !strings.Contains(err.Error(), "histogram") {
			t.Errorf("%s: accepted (%v)", in, err)
		}
	}
}
