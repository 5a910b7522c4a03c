package sim

import (
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// TuneGC sets the garbage collector for simulations of up to nodes nodes.
// Up to batchGCNodes nodes it keeps the heap within twice the live heap
// (GOGC 100) under a memory limit of heapBudget(nodes): the live heap is
// the nodes' replicas, views and queues, and what a run allocates beyond
// that (packets' parts, messages delivered and dequeued, the core's
// Readies) is garbage at once. Twice the live heap of 1,000 nodes at 30%
// loss (about 450-600 MB, the peaks in bursts of a relay to every member)
// was 1.2 GB resident; under the budget the collector runs a little more
// often near it, and the run takes no more CPU (fewer pages touched):
// 0.8 GB.
// Larger runs are treated as the batch jobs they are: their live heap is
// gigabytes of replicas, which each collection would only rescan, so the
// collector runs only when the heap nears half the machine's memory
// (10,000 nodes on one core: 62s with the default GOGC, 47s this way,
// same output). GOGC or GOMEMLIMIT in the environment take precedence.
// It returns a function that restores the settings it changed.
func TuneGC(nodes int) (restore func()) {
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		return func() {}
	}
	total := memTotal()
	if nodes > batchGCNodes && total > 0 {
		return CollectOnlyAt(int64(total / 2))
	}
	oldPercent := debug.SetGCPercent(simGCPercent)
	oldLimit := debug.SetMemoryLimit(math.MaxInt64)
	limit := heapBudget(nodes)
	if total > 0 {
		limit = min(limit, int64(total/2))
	}
	debug.SetMemoryLimit(limit)
	return func() {
		debug.SetGCPercent(oldPercent)
		debug.SetMemoryLimit(oldLimit)
	}
}

// heapBudget is the memory limit TuneGC sets for a run of up to nodes
// nodes (at most batchGCNodes): minHeapBudget, or heapPerNode2 bytes per
// node squared (a node's view, peer records and queue of every member),
// whichever is more. It is a soft limit: a run whose live heap is bigger
// gets the collector more often, not an error.
func heapBudget(nodes int) int64 {
	return max(minHeapBudget, int64(nodes)*int64(nodes)*heapPerNode2)
}

const (
	minHeapBudget = 800 << 20
	heapPerNode2  = 800
)

// batchGCNodes is the largest cluster TuneGC keeps the heap small for.
const batchGCNodes = 2000

// simGCPercent is the GOGC TuneGC sets.
const simGCPercent = 100

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
