package node

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/protocol"
)

// TestMetricsKnowEveryCode keeps the counters' label tables in step with
// the protocol: an op or error code added to protocol/protocol.go without
// a slot here would be counted as "unknown" or "other".
func TestMetricsKnowEveryCode(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "protocol", "protocol.go"))
	if err != nil {
		t.Fatal(err)
	}
	codes := regexp.MustCompile(`(?m)^\s+Code\w+\s+ErrorCode = "(\w+)"`).FindAllSubmatch(src, -1)
	if len(codes) < 10 {
		t.Fatalf("found only %d error codes in protocol.go: has its layout changed?", len(codes))
	}
	for _, m := range codes {
		if code := protocol.ErrorCode(m[1]); codeIndex(code) == codeOther {
			t.Errorf("error code %q has no counter slot: add it to errorCodes in metrics.go", code)
		}
	}
	ops := regexp.MustCompile(`(?m)^\s+Op\w+\s+= "(\w+)"\s+// request:`).FindAllSubmatch(src, -1)
	if len(ops) < 10 {
		t.Fatalf("found only %d request ops in protocol.go: has its layout changed?", len(ops))
	}
	names := opNames()
	for _, m := range ops {
		op := string(m[1])
		i := opIndex(op)
		if i == opUnknown || names[i] != op {
			t.Errorf("request op %q has no counter slot: add it to opIndex and opNames in metrics.go", op)
		}
	}
}

func TestLagHistogramBuckets(t *testing.T) {
	var h lagHistogram
	for _, d := range []time.Duration{-time.Second, 0, time.Millisecond, 1500 * time.Microsecond, 70 * time.Millisecond, time.Hour} {
		h.observe(d)
	}
	s := h.snapshot()
	if len(s.Bounds) != numLagBuckets || len(s.Counts) != numLagBuckets+1 {
		t.Fatalf("bounds %v counts %v", s.Bounds, s.Counts)
	}
	want := map[int]uint64{
		0:             3, // -1s (as 0), 0 and exactly 1ms: bounds are inclusive
		1:             1, // 1.5ms <= 2.5ms
		6:             1, // 70ms <= 100ms
		numLagBuckets: 1, // an hour: +Inf
	}
	for i, c := range s.Counts {
		if c != want[i] {
			t.Errorf("bucket %d (<= %v): %d, want %d", i, append(s.Bounds, 0)[i], c, want[i])
		}
	}
	if s.Count() != 6 || s.Negative != 1 {
		t.Fatalf("count %d negative %d", s.Count(), s.Negative)
	}
	if want := time.Hour + 70*time.Millisecond + 2500*time.Microsecond; s.Sum != want {
		t.Fatalf("sum %v, want %v", s.Sum, want)
	}
}

// TestMetricsCountSessionsAndRequests drives one gateway through each way
// a session ends and checks every counter moved by exactly what happened.
func TestMetricsCountSessionsAndRequests(t *testing.T) {
	n := newTestNode(t, func(c *Config) {
		c.Timeout = 400 * time.Millisecond
		c.Heartbeat = 100 * time.Millisecond
		c.MaxLineBytes = MinMaxLineBytes
	})
	base := n.Metrics()

	// alice: heartbeats, a status change, a rejected request, bye.
	a, _ := connect(t, n, "alice", "phone")
	for range 5 {
		a.sendRaw(`{"op":"hb"}`)
	}
	a.call(map[string]any{"op": "hb"})
	a.ok(map[string]any{"op": "status", "status": "away"})
	if f := a.call(map[string]any{"op": "status", "status": "sleepy"}); f.str("code") != string(protocol.CodeBadRequest) {
		t.Fatalf("bad status: %v", f)
	}
	a.sendRaw(`{"op":"dance","id":1}`)
	a.expectError(protocol.CodeUnknownOp)
	a.sendRaw(`not json`)
	a.expectError(protocol.CodeBadJSON)
	a.ok(map[string]any{"op": "bye"})
	a.expectClosed()

	// bob closes his connection; carol's line is too long; dave falls
	// silent and expires; erin is still connected when the node drains.
	b, _ := connect(t, n, "bob", "laptop")
	b.nc.Close()
	c, _ := connect(t, n, "carol", "tablet")
	c.sendRaw(`{"op":"hb","pad":"` + strings.Repeat("x", MinMaxLineBytes) + `"}`)
	c.expectError(protocol.CodeLineTooLong)
	d, _ := connect(t, n, "dave", "watch")
	d.expectError(protocol.CodeExpired)
	e, _ := connect(t, n, "erin", "desk")
	stop := keepBeating(e, 50*time.Millisecond)
	defer stop()
	e.ok(map[string]any{"op": "sub", "users": []string{"alice"}})
	// Only a session known dead is counted: wait for bob's and carol's.
	waitFor(t, "bob's and carol's sessions to end", func() bool { return n.Metrics().LocalSessions == 1 })

	m := n.Metrics()
	if m.Subscribers != 1 || m.UserSubscriptions != 1 || m.GroupSubscriptions != 0 {
		t.Fatalf("subscribers %d, subscriptions %d users %d groups", m.Subscribers, m.UserSubscriptions, m.GroupSubscriptions)
	}
	if got := m.Replica.Local[crdt.StateActive]; got != 1 {
		t.Fatalf("local active records %d, want 1 (erin)", got)
	}
	if got := m.Replica.Local[crdt.StateDisconnected] + m.Replica.Local[crdt.StateExpired]; got != 4 {
		t.Fatalf("local ended records %d, want 4", got)
	}
	if err := n.Drain(t.Context()); err != nil {
		t.Fatal(err)
	}
	m = n.Metrics()

	moved := func(what string, got, was, want uint64) {
		t.Helper()
		if got-was != want {
			t.Errorf("%s moved by %d, want %d", what, got-was, want)
		}
	}
	moved("sessions opened", m.SessionsOpened, base.SessionsOpened, 5)
	moved("expired", m.Expired, base.Expired, 1)
	for reason, want := range map[string]uint64{"bye": 1, "closed": 1, "line_too_long": 1, "shutting_down": 1} {
		moved("disconnects "+reason, m.Disconnects[reason], base.Disconnects[reason], want)
	}
	if total := n.Stats().Disconnected; total != 4 {
		t.Errorf("Stats.Disconnected %d, want 4", total)
	}
	moved("hello requests", m.Requests[protocol.OpHello], base.Requests[protocol.OpHello], 5)
	moved("status requests", m.Requests[protocol.OpStatus], base.Requests[protocol.OpStatus], 2)
	moved("bye requests", m.Requests[protocol.OpBye], base.Requests[protocol.OpBye], 1)
	moved("sub requests", m.Requests[protocol.OpSub], base.Requests[protocol.OpSub], 1)
	moved("unknown requests", m.Requests["unknown"], base.Requests["unknown"], 2)
	if hb := m.Requests[protocol.OpHB] - base.Requests[protocol.OpHB]; hb < 6 {
		t.Errorf("heartbeats moved by %d, want at least alice's 6", hb)
	}
	for k, want := range map[OpCode]uint64{
		{protocol.OpStatus, string(protocol.CodeBadRequest)}: 1,
		{"unknown", string(protocol.CodeUnknownOp)}:          1,
		{"unknown", string(protocol.CodeBadJSON)}:            1,
	} {
		moved("errors "+k.Op+"/"+k.Code, m.RequestErrors[k], base.RequestErrors[k], want)
	}
	if len(m.RequestErrors) != 3 {
		t.Errorf("request errors %v, want only the three above", m.RequestErrors)
	}
	if !m.Draining || m.LocalSessions != 0 {
		t.Errorf("draining %v with %d sessions", m.Draining, m.LocalSessions)
	}
}

// TestMetricsCountRemoteDeltas checks applied, stale and invalid remote
// deltas, and that each applied one is timed from its owner's write.
func TestMetricsCountRemoteDeltas(t *testing.T) {
	clock := newFakeClock()
	n := newTestNode(t, func(c *Config) { c.Clock = clock })
	rm := newRemote(t, "n2")
	d1 := rm.put("bob", "phone", 1, crdt.StateActive, crdt.StatusAvailable)
	d1 = writtenAt(d1, clock.Now().Add(-30*time.Millisecond)) // written 30ms before it arrives
	if err := n.ApplyDeltas([]crdt.Delta{d1}); err != nil {
		t.Fatal(err)
	}
	d2 := rm.put("bob", "phone", 1, crdt.StateActive, crdt.StatusBusy)
	d2 = writtenAt(d2, clock.Now().Add(time.Second)) // the owner's clock is ahead
	bad := crdt.Delta{Session: &crdt.Session{User: "x"}}
	if err := n.ApplyDeltas([]crdt.Delta{d1, d2, bad}); err == nil {
		t.Fatal("invalid delta accepted")
	}
	m := n.Metrics()
	if m.DeltasApplied != 2 || m.DeltasStale != 1 || m.DeltasInvalid != 1 {
		t.Fatalf("applied %d stale %d invalid %d, want 2 1 1", m.DeltasApplied, m.DeltasStale, m.DeltasInvalid)
	}
	h := m.PropagationLag
	if h.Count() != 2 || h.Negative != 1 || h.Sum != 30*time.Millisecond || h.Counts[0] != 1 || h.Counts[5] != 1 {
		t.Fatalf("lag histogram %+v: want 30ms (<= 50ms bucket) and one negative (as 0)", h)
	}
	if got := m.Replica.Remote[crdt.StateActive]; got != 1 {
		t.Fatalf("remote active records %d", got)
	}
	// A gateway marked down shows its sessions expired.
	n.MarkNodeDown("n2")
	if m := n.Metrics(); m.Replica.Remote[crdt.StateActive] != 0 || m.Replica.Remote[crdt.StateExpired] != 1 {
		t.Fatalf("after n2 went down: %+v", m.Replica)
	}
}

// writtenAt returns d with its record's write time set to at (a copy:
// records are immutable).
func writtenAt(d crdt.Delta, at time.Time) crdt.Delta {
	s := *d.Session
	s.Updated = at.UnixNano()
	d.Session = &s
	return d
}
