// Package procstat reads a process's CPU time and resident memory from
// Linux's /proc, for the baseline comparisons (docs/bench-compare.md).
package procstat

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ClockTicks is the unit of /proc/PID/stat's times (USER_HZ, 100 on
// every Linux this runs on).
const ClockTicks = 100

// CPU is the user plus system CPU time of pid, in seconds.
func CPU(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("cpu of %d: %w", pid, err)
	}
	return parseStat(b)
}

func parseStat(b []byte) (float64, error) {
	// the command name (field 2) is in parentheses and may hold spaces
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc stat: no command name")
	}
	f := strings.Fields(string(b[i+1:]))
	// after the name: state(3) ... utime(14) stime(15)
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc stat: %d fields", len(f))
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc stat: bad utime/stime %q %q", f[11], f[12])
	}
	return float64(ut+st) / ClockTicks, nil
}

// RSS is the resident set size of pid (VmRSS), in bytes.
func RSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("rss of %d: %w", pid, err)
	}
	return parseRSS(b)
}

func parseRSS(b []byte) (int64, error) {
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) != 2 || f[1] != "kB" {
				return 0, fmt.Errorf("/proc status: VmRSS %q", v)
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc status: VmRSS %q: %w", v, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("/proc status: no VmRSS")
}

// SumCPU is the CPU seconds of several processes together.
func SumCPU(pids []int) (float64, error) {
	var s float64
	for _, p := range pids {
		c, err := CPU(p)
		if err != nil {
			return 0, err
		}
		s += c
	}
	return s, nil
}
