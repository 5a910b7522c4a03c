package sim

import (
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// TuneGC sets the garbage collector for a simulation: a heap of up to
// 2.5 times the live heap (GOGC 150), and a memory limit of half the
// machine's memory beyond which the collector works harder rather than
// let the heap grow further. The live heap is the nodes' replicas, views
// and queues; what a run allocates beyond that (packets' parts, messages
// delivered and dequeued, dissem's Readies) is garbage at once, so the
// heap, and the resident memory, stay within a small multiple of what the
// cluster holds (1,000 nodes at 30% loss: under 1 GB). GOGC or GOMEMLIMIT
// in the environment take precedence. It returns a function that restores
// the settings it changed.
func TuneGC() (restore func()) {
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		return func() {}
	}
	oldPercent := debug.SetGCPercent(simGCPercent)
	oldLimit := debug.SetMemoryLimit(math.MaxInt64)
	if total := memTotal(); total > 0 {
		debug.SetMemoryLimit(int64(total / 2))
	}
	return func() {
		debug.SetGCPercent(oldPercent)
		debug.SetMemoryLimit(oldLimit)
	}
}

// simGCPercent is the GOGC TuneGC sets.
const simGCPercent = 150

// CollectOnlyAt turns the garbage collector off until the heap reaches
// limit bytes (GOGC off, GOMEMLIMIT limit), unless GOGC or GOMEMLIMIT is
// set in the environment, which then wins. It returns a function that
// restores the settings it changed.
func CollectOnlyAt(limit int64) (restore func()) {
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		return func() {}
	}
	oldLimit := debug.SetMemoryLimit(limit)
	oldPercent := debug.SetGCPercent(-1)
	return func() {
		debug.SetGCPercent(oldPercent)
		debug.SetMemoryLimit(oldLimit)
	}
}

// memTotal returns the machine's memory in bytes from /proc/meminfo, or 0.
func memTotal() uint64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
			kb, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}
