package main

import (
	"slices"
	"testing"
	"time"
)

func TestParseCommand(t *testing.T) {
	good := map[string]command{
		"quit":                             {op: opQuit},
		"gc":                               {op: opGC},
		"mark":                             {op: opMark},
		"write 10000 30s 1000000":          {op: opWrite, count: 10000, over: 30 * time.Second, first: 1000000},
		"partition on all":                 {op: opPartition, all: true},
		"partition on 127.0.0.1:1,[::1]:2": {op: opPartition, peers: []string{"127.0.0.1:1", "[::1]:2"}},
		"partition off":                    {op: opHeal},
	}
	for line, want := range good {
		got, err := parseCommand(line)
		if err != nil {
			t.Errorf("%q: %v", line, err)
			continue
		}
		if got.op != want.op || got.count != want.count || got.over != want.over || got.first != want.first ||
			got.all != want.all || !slices.Equal(got.peers, want.peers) {
			t.Errorf("%q: got %+v, want %+v", line, got, want)
		}
	}
	for _, line := range []string{"", "write", "write 10 1s", "write -1 1s 0", "write 10 soon 0", "write 10 1s x",
		"partition", "partition on", "partition maybe", "gc now", "stop"} {
		if _, err := parseCommand(line); err == nil {
			t.Errorf("%q: accepted", line)
		}
	}
}

func TestParseScenarios(t *testing.T) {
	got, err := parseScenarios("joiner, partition,")
	if err != nil || !slices.Equal(got, []string{"joiner", "partition"}) {
		t.Errorf("got %q, %v", got, err)
	}
	for _, s := range []string{"", ",", "joiner,rolling"} {
		if _, err := parseScenarios(s); err == nil {
			t.Errorf("%q: accepted", s)
		}
	}
}

func TestFormat(t *testing.T) {
	for n, want := range map[uint64]string{0: "0 B", 1023: "1023 B", 1536: "1.5 KiB", 64 << 20: "64.0 MiB", 3 << 30: "3.0 GiB"} {
		if got := fmtBytes(n); got != want {
			t.Errorf("fmtBytes(%d) = %q, want %q", n, got, want)
		}
	}
	for n, want := range map[int]string{0: "0", 999: "999", 1000: "1,000", 1000000: "1,000,000", -12345: "-12,345"} {
		if got := fmtCount(n); got != want {
			t.Errorf("fmtCount(%d) = %q, want %q", n, got, want)
		}
	}
	for d, want := range map[time.Duration]string{558 * time.Millisecond: "558 ms", 2700 * time.Millisecond: "2.7 s"} {
		if got := fmtDur(d); got != want {
			t.Errorf("fmtDur(%v) = %q, want %q", d, got, want)
		}
	}
}

// A joiner that became ready before it held every record fails the
// readiness target even though it caught up in time.
func TestVerdictReadyEarly(t *testing.T) {
	r := result{name: "joiner", target: 100, checkReady: true, readyAfter: time.Second, fullAfter: 2 * time.Second, heldAtReady: 40}
	vs := r.verdicts()
	if len(vs) != 1 || vs[0].outcome != "FAIL" {
		t.Fatalf("got %+v", vs)
	}
	r.heldAtReady = 100
	if vs := r.verdicts(); vs[0].outcome != "PASS" {
		t.Fatalf("ready holding all: got %+v", vs)
	}
	r.readyAfter, r.fullAfter = -1, -1
	if vs := r.verdicts(); vs[0].outcome != "FAIL" {
		t.Fatalf("never ready: got %+v", vs)
	}
}
