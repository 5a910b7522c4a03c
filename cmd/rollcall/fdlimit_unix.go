//go:build unix

package main

import (
	"fmt"
	"math"
	"syscall"
)

// raiseFileLimit raises the process's soft RLIMIT_NOFILE to its hard limit
// and returns both (-1 for unlimited). Go's runtime raises it at start-up
// already, but to one below the hard limit (see syscall's rlimit.go); this
// takes the last one too, and says what the limit is either way.
func raiseFileLimit() (soft, hard int, err error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, 0, fmt.Errorf("getrlimit: %w", err)
	}
	if lim.Cur < lim.Max {
		raised := lim
		raised.Cur = lim.Max
		// An unlimited hard limit may still refuse (Linux caps the soft
		// limit at fs.nr_open): keep what there is.
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised) == nil {
			lim = raised
		}
	}
	count := func(v uint64) int {
		if v > math.MaxInt32 {
			return -1
		}
		return int(v)
	}
	return count(uint64(lim.Cur)), count(uint64(lim.Max)), nil
}
