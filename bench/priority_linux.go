package bench

import (
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// probePriority is the SCHED_FIFO priority a probe generator takes: low
// among real-time priorities, so kernel threads that need the CPU first
// still get it.
const probePriority = 10

// raisePriority moves every thread of this process to SCHED_FIFO, or,
// where that is not permitted, to nice -20, and returns which it got:
// "fifo", "nice" or "normal" (neither was permitted). Threads the Go
// runtime starts later inherit the policy of the thread that starts them.
func raisePriority() string {
	// Twice: a thread started meanwhile by one not yet raised is caught
	// by the second pass.
	got := "fifo"
	for range 2 {
		for _, tid := range threads() {
			if err := unix.SchedSetAttr(tid, &unix.SchedAttr{Policy: unix.SCHED_FIFO, Priority: probePriority}, 0); err != nil {
				got = ""
				break
			}
		}
	}
	if got != "" {
		return got
	}
	got = "nice"
	for range 2 {
		for _, tid := range threads() {
			if err := unix.Setpriority(unix.PRIO_PROCESS, tid, -20); err != nil {
				return "normal"
			}
		}
	}
	return got
}

// threads returns the ids of this process's threads.
func threads() []int {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return []int{unix.Gettid()}
	}
	var out []int
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, tid)
		}
	}
	return out
}
