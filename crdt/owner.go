package crdt

import (
	"strconv"
	"time"
)

// The owner's rules: how the gateway that holds a session picks its epoch,
// builds the records it writes, and finds when the session expires. Pure
// functions of their arguments (times are Unix or monotonic nanoseconds,
// as the caller's clock reads them); node/ runs them on its clocks and the
// simulator on its virtual one, so both follow the same rules.

// MaxIssuedEpoch is the largest session epoch an owner issues: 2^53-1, the
// largest integer a JSON client that reads numbers as IEEE doubles (a
// browser) holds exactly. Replicas merge any epoch they are given (up to
// 2^64-1; the gossip layer refuses one above this from the network); an
// owner never issues one above this. A key whose next epoch
// would exceed it cannot open a session (NextEpoch returns
// EpochExhaustedError): an epoch that cannot grow is refused, never
// wrapped.
const MaxIssuedEpoch = 1<<53 - 1

// ClockEpochFloor is the smallest epoch an owner issues at now (Unix
// nanoseconds): the time in Unix milliseconds, 0 before 1970. An epoch is 1
// + the largest the owner knows for the key (its replica's or the client's
// last epoch), but an owner does not always know the latest: one just
// restarted, before anti-entropy has brought it the device's records, or
// one cut off by a partition. It would issue an epoch already used, and
// the old connection's record of that epoch (its disconnect, arriving
// later) would win over the live session. A floor from the clock makes a
// later connection's epoch larger than an earlier one's whatever the owner
// knows, as long as the owners' clocks agree to within the time between
// the two connections (a client that sends its last epoch needs no clock).
// Milliseconds stay far below MaxIssuedEpoch (2^53 ms is 285,000 years).
//
// Not to be confused with the floors GC leaves behind for collected
// tombstones (epochfloor.go), which Replica.MaxEpoch already includes.
func ClockEpochFloor(now int64) uint64 {
	if ms := now / int64(time.Millisecond); ms > 0 {
		return uint64(ms)
	}
	return 0
}

// EpochExhaustedError is NextEpoch's refusal: the key holds an epoch at or
// above MaxIssuedEpoch, so no newer one can be issued.
type EpochExhaustedError struct {
	Held uint64 // the larger of the replica's epoch and the client's last one
}

func (e *EpochExhaustedError) Error() string {
	return "crdt: no newer epoch exists: the key holds epoch " + strconv.FormatUint(e.Held, 10) +
		" and the largest issued is " + strconv.FormatUint(MaxIssuedEpoch, 10)
}

// NextEpoch returns the epoch of a new session of a key at now (Unix
// nanoseconds): above both held (Replica.MaxEpoch of the key) and
// lastEpoch (the client's last epoch, 0 if it sent none), and at least
// ClockEpochFloor(now):
//
//	max(1 + max(held, lastEpoch), ClockEpochFloor(now))
//
// which is at most MaxIssuedEpoch (the clock's floor of any int64 time is
// below it: 2^63 ns is 9.2e12 ms). It returns an *EpochExhaustedError when
// max(held, lastEpoch) is at or above MaxIssuedEpoch.
func NextEpoch(held, lastEpoch uint64, now int64) (uint64, error) {
	h := max(held, lastEpoch)
	if h >= MaxIssuedEpoch {
		return 0, &EpochExhaustedError{Held: h}
	}
	return max(1+h, ClockEpochFloor(now)), nil
}

// ExpiryDeadline is when a session whose last request (heartbeats
// included) was at lastActive expires: lastActive + timeout, on the clock
// lastActive was read on.
func ExpiryDeadline(lastActive int64, timeout time.Duration) int64 {
	return lastActive + int64(timeout)
}

// Expired reports whether a session with deadline has expired at now: the
// deadline has been reached.
func Expired(deadline, now int64) bool { return deadline <= now }

// FirstSweepAt returns the time of the first expiry sweep at or after
// deadline, for sweeps at start + k*interval (k any integer): the sweep
// that finds the session Expired. An interval of 0 or less returns
// deadline.
func FirstSweepAt(deadline, start, interval int64) int64 {
	if interval <= 0 {
		return deadline
	}
	d := deadline - start
	k := d / interval
	if d%interval > 0 {
		k++
	}
	return start + k*interval
}

// OwnedSession is what the owner of a session holds of it besides its
// state and deadline: the fields of the records it writes.
type OwnedSession struct {
	User, Device string
	ID           string // unique per connection
	Epoch        uint64 // from NextEpoch
	Status       Status
	Groups       []string // sorted, unique
	Meta, Info   string   // as Session's
}

// Record returns the record the owner writes for s in state st, for
// Replica.PutLocal: ExpiresAt is ExpiryDeadline(lastActive, timeout), with
// lastActive the Unix nanoseconds of the session's last request
// (heartbeats included). The record shares s.Groups (PutLocal copies it).
func (s OwnedSession) Record(st State, lastActive int64, timeout time.Duration) Session {
	return Session{
		User: s.User, Device: s.Device, ID: s.ID, Epoch: s.Epoch,
		State: st, Status: s.Status, Groups: s.Groups,
		ExpiresAt: ExpiryDeadline(lastActive, timeout),
		Meta:      s.Meta, Info: s.Info,
	}
}
