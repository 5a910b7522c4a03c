//go:build unix

package node

import (
	"errors"
	"math"
	"syscall"
)

// processFileLimit returns the process's soft RLIMIT_NOFILE, or 0 when it
// is unlimited (or beyond any count of connections).
func processFileLimit() (int, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	if lim.Cur > math.MaxInt32 { // RLIM_INFINITY included
		return 0, nil
	}
	return int(lim.Cur), nil
}

// isFDExhausted reports whether err is accept's "too many open files", of
// the process (EMFILE) or the system (ENFILE).
func isFDExhausted(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}
