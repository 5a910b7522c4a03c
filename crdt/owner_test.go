package crdt

import (
	"errors"
	"math"
	"slices"
	"testing"
	"time"
)

// ms is Unix milliseconds as Unix nanoseconds.
func ms(m int64) int64 { return m * int64(time.Millisecond) }

func TestClockEpochFloor(t *testing.T) {
	for _, tc := range []struct {
		now  int64
		want uint64
	}{
		{ms(1_700_000_000_123) + 999_999, 1_700_000_000_123}, // truncated to the millisecond
		{ms(1), 1},
		{999_999, 0}, // under a millisecond after 1970
		{0, 0},
		{-ms(5), 0}, // before 1970
		{math.MinInt64, 0},
		{math.MaxInt64, math.MaxInt64 / 1_000_000},
	} {
		if got := ClockEpochFloor(tc.now); got != tc.want {
			t.Errorf("ClockEpochFloor(%d) = %d, want %d", tc.now, got, tc.want)
		}
	}
	if f := ClockEpochFloor(math.MaxInt64); f >= MaxIssuedEpoch {
		t.Errorf("the clock's floor at the latest time, %d, reaches MaxIssuedEpoch", f)
	}
}

func TestNextEpoch(t *testing.T) {
	const clock = 1_700_000_000_000 // ms
	now := ms(clock)
	for _, tc := range []struct {
		name            string
		held, lastEpoch uint64
		now             int64
		want            uint64 // 0: refused
	}{
		{"first session: the clock in ms", 0, 0, now, clock},
		{"replica above the clock", clock + 5, 0, now, clock + 6},
		{"same millisecond again: one above", clock, 0, now, clock + 1},
		{"last_epoch above the replica", 3, clock + 9, now, clock + 10},
		{"last_epoch honoured by a gateway that knows nothing", 0, 41, 0, 42},
		{"replica above last_epoch", 70, 41, 0, 71},
		{"clock before 1970: counting from 1", 0, 0, -ms(1), 1},
		{"one below the largest: the largest", MaxIssuedEpoch - 1, 0, now, MaxIssuedEpoch},
		{"last_epoch one below the largest", 0, MaxIssuedEpoch - 1, now, MaxIssuedEpoch},
		{"replica at the largest: refused", MaxIssuedEpoch, 0, now, 0},
		{"last_epoch at the largest: refused", 0, MaxIssuedEpoch, now, 0},
		{"a peer taught 2^64-1: refused", math.MaxUint64, 7, now, 0},
		{"latest clock, empty key", 0, 0, math.MaxInt64, math.MaxInt64 / 1_000_000},
	} {
		got, err := NextEpoch(tc.held, tc.lastEpoch, tc.now)
		if tc.want == 0 {
			exh, ok := errors.AsType[*EpochExhaustedError](err)
			if !ok || exh.Held != max(tc.held, tc.lastEpoch) {
				t.Errorf("%s: NextEpoch(%d, %d, %d) = %d, %v; want EpochExhaustedError{Held: %d}",
					tc.name, tc.held, tc.lastEpoch, tc.now, got, err, max(tc.held, tc.lastEpoch))
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: NextEpoch(%d, %d, %d) = %d, %v; want %d", tc.name, tc.held, tc.lastEpoch, tc.now, got, err, tc.want)
		}
		if got > MaxIssuedEpoch {
			t.Errorf("%s: epoch %d above MaxIssuedEpoch", tc.name, got)
		}
	}
}

// TestNextEpochMonotonicOverReconnects: a device reconnecting over and
// over gets a strictly larger epoch each time, which its replica accepts,
// whether it is the same gateway within one millisecond (the replica's
// epoch), a gateway that knows nothing but hears last_epoch, or one that
// knows nothing and hears nothing once the clock has passed the epochs.
func TestNextEpochMonotonicOverReconnects(t *testing.T) {
	k := Key{User: "ann", Device: "phone"}
	gw := newTestReplica(t, "gw", 1, Config{})
	steps := []struct {
		name     string
		fresh    bool // a gateway that holds nothing of k (restarted, or cut off)
		sendLast bool // the client sends its last epoch
		now      int64
	}{
		{"first", false, false, ms(1000)},
		{"same ms, same gateway", false, false, ms(1000)},
		{"same ms, same gateway again", false, true, ms(1000)},
		{"same ms, fresh gateway, last_epoch", true, true, ms(1000)},
		{"clock moved back, last_epoch", true, true, ms(400)},
		{"clock moved back, same gateway", false, false, ms(400)},
		{"a second later, fresh gateway, no last_epoch", true, false, ms(2000)},
		{"later still", false, true, ms(5000)},
	}
	var last uint64
	for _, st := range steps {
		held := gw.MaxEpoch(k)
		if st.fresh {
			held = 0
		}
		var sent uint64
		if st.sendLast {
			sent = last
		}
		epoch, err := NextEpoch(held, sent, st.now)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if epoch <= last {
			t.Fatalf("%s: epoch %d not above the previous %d", st.name, epoch, last)
		}
		if _, err := gw.PutLocal(OwnedSession{User: k.User, Device: k.Device, ID: st.name, Epoch: epoch}.
			Record(StateActive, st.now, time.Minute), st.now); err != nil {
			t.Fatalf("%s: the gateway refused epoch %d: %v", st.name, epoch, err)
		}
		last = epoch
	}
}

func TestExpiryDeadline(t *testing.T) {
	for _, tc := range []struct {
		lastActive int64
		timeout    time.Duration
		want       int64
	}{
		{0, 15 * time.Second, int64(15 * time.Second)},
		{ms(1_700_000_000_000), 30 * time.Second, ms(1_700_000_030_000)},
		{int64(3 * time.Second), 0, int64(3 * time.Second)},
	} {
		got := ExpiryDeadline(tc.lastActive, tc.timeout)
		if got != tc.want {
			t.Errorf("ExpiryDeadline(%d, %v) = %d, want %d", tc.lastActive, tc.timeout, got, tc.want)
		}
		if !Expired(got, got) || Expired(got, got-1) {
			t.Errorf("deadline %d: not expired exactly at it, or expired a nanosecond before", got)
		}
	}
}

func TestFirstSweepAt(t *testing.T) {
	const sec = int64(time.Second)
	for _, tc := range []struct {
		name                      string
		deadline, start, interval int64
		want                      int64
	}{
		{"on a sweep: that sweep", 10 * sec, 0, sec, 10 * sec},
		{"just after a sweep: the next", 10*sec + 1, 0, sec, 11 * sec},
		{"just before a sweep: that sweep", 11*sec - 1, 0, sec, 11 * sec},
		{"sweeps from the gateway's start", 15 * sec, 2*sec + 300, sec, 15*sec + 300},
		{"deadline before the start", 0, 5 * sec, 2 * sec, sec},
		{"negative deadline", -sec - 1, 0, sec, -sec},
		{"no interval: the deadline", 7, 3, 0, 7},
	} {
		got := FirstSweepAt(tc.deadline, tc.start, tc.interval)
		if got != tc.want {
			t.Errorf("%s: FirstSweepAt(%d, %d, %d) = %d, want %d", tc.name, tc.deadline, tc.start, tc.interval, got, tc.want)
		}
		if tc.interval > 0 && (!Expired(tc.deadline, got) || Expired(tc.deadline, got-tc.interval)) {
			t.Errorf("%s: sweep %d is not the first to find deadline %d expired", tc.name, got, tc.deadline)
		}
	}
}

func TestOwnedSessionRecord(t *testing.T) {
	s := OwnedSession{User: "ann", Device: "phone", ID: "ses_1", Epoch: 1_700_000_000_000,
		Status: StatusBusy, Groups: []string{"a", "b"}}
	lastActive := ms(1_700_000_000_500)
	for _, st := range []State{StateActive, StateDisconnected, StateExpired} {
		got := s.Record(st, lastActive, 15*time.Second)
		want := Session{User: "ann", Device: "phone", ID: "ses_1", Epoch: 1_700_000_000_000,
			State: st, Status: StatusBusy, Groups: []string{"a", "b"}, ExpiresAt: ms(1_700_000_015_500)}
		if got.User != want.User || got.Device != want.Device || got.ID != want.ID || got.Epoch != want.Epoch ||
			got.State != want.State || got.Status != want.Status || !slices.Equal(got.Groups, want.Groups) ||
			got.ExpiresAt != want.ExpiresAt || got.Seq != 0 || got.Gateway != "" || got.Updated != 0 ||
			got.Origin != (Origin{}) || got.Version != 0 {
			t.Errorf("Record(%v) = %+v, want %+v (PutLocal stamps the rest)", st, got, want)
		}
	}
}
