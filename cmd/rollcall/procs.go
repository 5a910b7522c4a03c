package main

import (
	"os"
	"runtime"

	"go.uber.org/zap"
)

// schedulerSlots sizes the Go scheduler for the event loop and returns
// how many pollers the node runs (node.Config.Pollers). Each poller waits
// in a blocking epoll_wait holding its P; with no P to spare, every
// goroutine it wakes (gossip, events, timers) waits until the runtime's
// monitor takes the P back from the waiting poller, and handing the P
// back and forth costs a thread switch per wakeup. So the agent runs one
// poller per CPU the runtime found (GOMAXPROCS: the CPU affinity and the
// cgroup's CPU limit) and one P more than that. Measured with one agent
// pinned to one core under 10,000 sessions at 20,000 heartbeats/s: 17%
// less CPU per heartbeat; where gateways share cores, status changes cost
// more (docs/performance.md). A GOMAXPROCS given in the environment is
// kept, and the pollers are one fewer than it (at least one).
func schedulerSlots(log *zap.Logger) int {
	procs := runtime.GOMAXPROCS(0)
	if os.Getenv("GOMAXPROCS") != "" {
		return max(1, procs-1)
	}
	runtime.GOMAXPROCS(procs + 1)
	log.Debug("scheduler sized for the event loop", zap.Int("pollers", procs), zap.Int("gomaxprocs", procs+1))
	return procs
}
