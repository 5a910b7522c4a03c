package chaos

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseSeeds reads a seed list: comma- or space-separated seeds and
// ranges, "1..20" or "3,7,40..42".
func ParseSeeds(s string) ([]uint64, error) {
	var out []uint64
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' }) {
		lo, hi, isRange := strings.Cut(f, "..")
		a, err := strconv.ParseUint(lo, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("seed %q: %w", f, err)
		}
		b := a
		if isRange {
			if b, err = strconv.ParseUint(hi, 10, 64); err != nil {
				return nil, fmt.Errorf("seed range %q: %w", f, err)
			}
			if b < a || b-a > 100000 {
				return nil, fmt.Errorf("seed range %q: want lo..hi with hi >= lo", f)
			}
		}
		for x := a; ; x++ {
			out = append(out, x)
			if x == b {
				break
			}
		}
	}
	return out, nil
}
