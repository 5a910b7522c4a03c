// Package stall tells a process's own stalls from the silence of its peers.
//
// A gateway stopped by SIGSTOP, a paused VM, or a long scheduler or
// collector pause reads nothing while it is stopped: on resume every client
// and every peer looks silent for the length of the stall, though their
// heartbeats and announcements sit unread in socket buffers. Deadlines must
// not count that time. A Detector is fed the readings of a periodic loop
// (the session sweeper, the lease tick); a reading later than the loop's
// period by more than a threshold reveals a stall, and the detector keeps the
// total. A deadline clock that subtracts the total stops during stalls, so a
// stall extends every deadline by its length.
//
// The package is pure: time is an argument (nanoseconds of a monotonic
// clock), and a Detector is not safe for concurrent use.
package stall

import "time"

// Detector accumulates the stalls revealed by the readings of a loop that
// should run every interval.
type Detector struct {
	interval  int64
	threshold int64
	last      int64
	started   bool
	total     int64
}

// NewDetector returns a detector for a loop that runs every interval; a
// reading more than threshold later than expected counts as a stall. The
// threshold should be well above the loop's ordinary lateness on a loaded
// machine (tens of milliseconds) and well below the deadlines it protects.
func NewDetector(interval, threshold time.Duration) *Detector {
	return &Detector{interval: int64(interval), threshold: int64(max(threshold, 0))}
}

// Observe records a reading of the loop at now and returns the stall it
// reveals: the time since the previous reading beyond one interval, if that
// exceeds the threshold; otherwise 0. Readings that go backwards are
// ignored.
func (d *Detector) Observe(now int64) time.Duration {
	if !d.started {
		d.started, d.last = true, now
		return 0
	}
	gap := now - d.last
	if gap <= 0 {
		return 0
	}
	d.last = now
	late := gap - d.interval
	if late <= d.threshold {
		return 0
	}
	d.total += late
	return time.Duration(late)
}

// Total returns the sum of every stall observed so far.
func (d *Detector) Total() time.Duration { return time.Duration(d.total) }
