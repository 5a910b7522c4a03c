package bench

import (
	"encoding/json"
	"fmt"
	"math"
	"math/bits"
	"time"
)

// subBits is the histogram's precision: 2^subBits linear sub-buckets below
// 2^subBits ns, then 2^(subBits-1) sub-buckets per power of two, so a
// recorded value is off by at most 1/2^(subBits-1) (under 1.6%).
const subBits = 7

const (
	subCount = 1 << subBits
	subHalf  = subCount / 2
	// maxBucket is one past the index of the largest int64.
	maxBucket = subCount + (64-subBits)*subHalf
)

// Histogram is a log-bucket (HDR-style) histogram of durations, in
// nanoseconds. The zero value is empty and ready. Not safe for concurrent
// use.
type Histogram struct {
	counts []uint64
	n      uint64
	sum    float64 // ns
	min    int64
	max    int64
}

func bucketOf(v int64) int {
	if v < subCount {
		return int(v)
	}
	e := bits.Len64(uint64(v)) - subBits // >= 1
	m := int(uint64(v) >> e)             // in [subHalf, subCount)
	return subCount + (e-1)*subHalf + (m - subHalf)
}

// bucketRange returns the smallest and largest value bucket i holds.
func bucketRange(i int) (lo, hi int64) {
	if i < subCount {
		return int64(i), int64(i)
	}
	e := (i-subCount)/subHalf + 1
	m := int64((i-subCount)%subHalf + subHalf)
	lo = m << e
	return lo, lo + (int64(1) << e) - 1
}

// Record adds one duration; a negative one counts as 0.
func (h *Histogram) Record(d time.Duration) {
	v := max(int64(d), 0)
	i := bucketOf(v)
	if i >= len(h.counts) {
		h.counts = append(h.counts, make([]uint64, i+1-len(h.counts))...)
	}
	h.counts[i]++
	if h.n == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.n++
	h.sum += float64(v)
}

// Count is how many values were recorded.
func (h *Histogram) Count() uint64 { return h.n }

// Max is the largest value recorded (0 when empty).
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) }

// Mean is the mean of the values recorded (0 when empty).
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.sum / float64(h.n))
}

// Quantile returns the value at quantile q (0..1): the midpoint of the
// bucket holding the ceil(q*n)-th smallest value, clamped to the exact
// minimum and maximum; the smallest and largest values are exact. 0 when
// empty.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	q = math.Min(math.Max(q, 0), 1)
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = max(rank, 1)
	switch rank {
	case h.n:
		return time.Duration(h.max)
	case 1:
		return time.Duration(h.min)
	}
	var cum uint64
	for i, c := range h.counts {
		cum += c
		if cum >= rank {
			lo, hi := bucketRange(i)
			v := lo + (hi-lo)/2
			return time.Duration(min(max(v, h.min), h.max))
		}
	}
	return time.Duration(h.max)
}

// Clone returns a copy of h sharing nothing with it.
func (h *Histogram) Clone() Histogram {
	c := *h
	c.counts = append([]uint64(nil), h.counts...)
	return c
}

// Merge adds o's values to h.
func (h *Histogram) Merge(o *Histogram) {
	if o == nil || o.n == 0 {
		return
	}
	if len(o.counts) > len(h.counts) {
		h.counts = append(h.counts, make([]uint64, len(o.counts)-len(h.counts))...)
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	h.n += o.n
	h.sum += o.sum
}

// CDF returns (value, fraction of values <= value) at each non-empty
// bucket's upper bound, for plotting.
func (h *Histogram) CDF() (vals []time.Duration, frac []float64) {
	var cum uint64
	for i, c := range h.counts {
		if c == 0 {
			continue
		}
		cum += c
		_, hi := bucketRange(i)
		vals = append(vals, time.Duration(min(hi, h.max)))
		frac = append(frac, float64(cum)/float64(h.n))
	}
	return vals, frac
}

// histJSON is a Histogram on the wire: sparse [bucket, count] pairs.
type histJSON struct {
	Buckets [][2]uint64 `json:"b,omitempty"`
	Sum     float64     `json:"sum,omitempty"`
	Min     int64       `json:"min,omitempty"`
	Max     int64       `json:"max,omitempty"`
}

// MarshalJSON encodes the histogram sparsely.
func (h Histogram) MarshalJSON() ([]byte, error) {
	j := histJSON{Sum: h.sum, Min: h.min, Max: h.max}
	for i, c := range h.counts {
		if c > 0 {
			j.Buckets = append(j.Buckets, [2]uint64{uint64(i), c})
		}
	}
	return json.Marshal(j)
}

// UnmarshalJSON decodes MarshalJSON's form, refusing bucket indexes out of
// range, duplicate or unordered buckets, and min/max inconsistent with them.
func (h *Histogram) UnmarshalJSON(b []byte) error {
	var j histJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return fmt.Errorf("histogram: %w", err)
	}
	var out Histogram
	last := -1
	for _, p := range j.Buckets {
		if p[0] >= maxBucket {
			return fmt.Errorf("histogram: bucket %d out of range", p[0])
		}
		i := int(p[0])
		if i <= last {
			return fmt.Errorf("histogram: bucket %d not after %d", i, last)
		}
		if p[1] == 0 {
			return fmt.Errorf("histogram: bucket %d has a zero count", i)
		}
		last = i
		if out.n+p[1] < out.n {
			return fmt.Errorf("histogram: count overflows")
		}
		out.n += p[1]
		out.counts = append(out.counts, make([]uint64, i+1-len(out.counts))...)
		out.counts[i] = p[1]
	}
	if out.n > 0 {
		loFirst, hiFirst := bucketRange(firstNonZero(out.counts))
		loLast, hiLast := bucketRange(last)
		if j.Min < loFirst || j.Min > hiFirst || j.Max < loLast || j.Max > hiLast {
			return fmt.Errorf("histogram: min %d / max %d outside their buckets", j.Min, j.Max)
		}
		if math.IsNaN(j.Sum) || math.IsInf(j.Sum, 0) || j.Sum < 0 {
			return fmt.Errorf("histogram: bad sum %v", j.Sum)
		}
		out.min, out.max, out.sum = j.Min, j.Max, j.Sum
	} else if j.Min != 0 || j.Max != 0 || j.Sum != 0 {
		return fmt.Errorf("histogram: empty with min/max/sum set")
	}
	*h = out
	return nil
}

func firstNonZero(c []uint64) int {
	for i, v := range c {
		if v > 0 {
			return i
		}
	}
	return 0
}
