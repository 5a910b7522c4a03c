package chaos

import (
	"encoding/json"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rollcall/rollcall/protocol"
)

// TestCheckHistories checks the hand-made histories of testdata/: one
// that keeps every promise, and one breaking each promise once (each file
// says how in its comment lines).
func TestCheckHistories(t *testing.T) {
	want := map[string]map[string]int{
		"good.jsonl":          {},
		"lost.jsonl":          {Lost: 1},
		"lost_status.jsonl":   {Lost: 1},
		"lost_expired.jsonl":  {Lost: 1},
		"ghost.jsonl":         {Ghost: 1},
		"order_version.jsonl": {Order: 1},
		"order_epoch.jsonl":   {Order: 1},
		"convergence.jsonl":   {Convergence: 1},
		"process.jsonl":       {Process: 1},
	}
	files, err := filepath.Glob("testdata/*.jsonl")
	if err != nil || len(files) != len(want) {
		t.Fatalf("testdata has %d histories (%v), want %d", len(files), err, len(want))
	}
	for _, path := range files {
		name := filepath.Base(path)
		t.Run(name, func(t *testing.T) {
			h, err := ReadHistoryFile(path)
			if err != nil {
				t.Fatal(err)
			}
			rep := Check(h)
			if got := rep.Kinds(); !maps.Equal(got, want[name]) {
				var s strings.Builder
				rep.Write(&s)
				t.Errorf("violations %v, want %v:\n%s", got, want[name], s.String())
			}
			if rep.Sessions != 4 || rep.Faults != 1 {
				t.Errorf("%d sessions, %d faults; want 4 and 1", rep.Sessions, rep.Faults)
			}
			// Every violation names the history lines that show it.
			for _, v := range rep.Violations {
				if len(v.Lines) == 0 {
					t.Errorf("%s violation without lines: %s", v.Kind, v.Msg)
				}
			}
		})
	}
}

// TestCheckPauseExcuses: a gateway paused to the end of the run is excused
// to the end.
func TestCheckPauseExcuses(t *testing.T) {
	h, err := ReadHistoryFile("testdata/good.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	// Without gw2's pause, its poll answered at 2503 for a get sent at 2000
	// still shows u1/laptop, whose bye was answered at 2002: fine (within
	// propagation). But the pause also excuses gw2 until 4760; drop the
	// CONT and gw2 stays excused to the end: still no violation, and one
	// fault fewer.
	var keep []Record
	var lines []int
	for i, r := range h.Records {
		if r.K == KindGW && r.Sig == "CONT" {
			continue
		}
		keep = append(keep, r)
		lines = append(lines, h.Lines[i])
	}
	h.Records, h.Lines = keep, lines
	if rep := Check(h); len(rep.Violations) != 0 {
		var s strings.Builder
		rep.Write(&s)
		t.Fatalf("a gateway paused to the end is excused; got:\n%s", s.String())
	}
}

func TestReadHistoryCutShort(t *testing.T) {
	h, err := ReadHistory(strings.NewReader("# a comment\n{\"t\":1,\"k\":\"stop\"}\n\n{\"t\":2,\"k\":\"o"))
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Records) != 1 || h.Lines[0] != 2 {
		t.Fatalf("records %v lines %v", h.Records, h.Lines)
	}
	if _, err := ReadHistory(strings.NewReader("{bad\n{\"t\":1,\"k\":\"stop\"}\n")); err == nil {
		t.Fatal("a bad line before the last is an error")
	}
	if rep := Check(&History{}); len(rep.Violations) != 1 || rep.Violations[0].Kind != Process {
		t.Fatalf("a history without a header: %v", rep.Violations)
	}
}

// edit returns a copy of h with the records for which keep returns false
// dropped and extra appended (as new lines at the end of the file).
func edit(t *testing.T, h *History, keep func(Record) bool, extra ...Record) *History {
	t.Helper()
	out := &History{Raw: slices.Clone(h.Raw)}
	for i, r := range h.Records {
		if keep == nil || keep(r) {
			out.Records = append(out.Records, r)
			out.Lines = append(out.Lines, h.Lines[i])
		}
	}
	for _, r := range extra {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		out.Raw = append(out.Raw, string(b))
		out.Records = append(out.Records, r)
		out.Lines = append(out.Lines, len(out.Raw))
	}
	return out
}

func mustRead(t *testing.T, path string) *History {
	t.Helper()
	h, err := ReadHistoryFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func wantKinds(t *testing.T, h *History, want map[string]int) {
	t.Helper()
	rep := Check(h)
	if got := rep.Kinds(); !maps.Equal(got, want) {
		var s strings.Builder
		rep.Write(&s)
		t.Errorf("violations %v, want %v:\n%s", got, want, s.String())
	}
}

// TestCheckHarnessStall: events that waited in the socket while the
// harness was starved are dated from the stall's start. In good.jsonl,
// u2's move to epoch 2 (c3, welcomed at 3003, must show by 4865) reaches
// gw1's subscriber late, after a stale "offline" event: both received
// just after a stall of the harness from 3000 to 4950. With the stall
// recorded that is no violation.
func TestCheckHarnessStall(t *testing.T) {
	h := mustRead(t, "testdata/good.jsonl")
	late := func(r Record) bool {
		return !(r.K == KindObs && r.Src == "event" && r.GW == "gw1" && len(r.P) == 1 && r.P[0].User == "u2" && r.T > 3000)
	}
	u2 := func(v uint64, ss ...protocol.SessionInfo) protocol.Presence {
		p := protocol.Presence{User: "u2", Status: "offline", Sessions: ss, Version: v}
		if len(ss) > 0 {
			p.Online, p.Status = true, "available"
		}
		return p
	}
	c := protocol.SessionInfo{Session: "ses_c", Device: "phone", Epoch: 2, Gateway: "gw1", Status: "busy"}
	events := []Record{
		{T: 5000, K: KindObs, Src: "event", GW: "gw1", Life: 1, C: 10, P: []protocol.Presence{u2(17)}},
		{T: 5001, K: KindObs, Src: "event", GW: "gw1", Life: 1, C: 10, P: []protocol.Presence{u2(18, c)}},
	}
	stall := Record{T: 4950, K: KindStall, From: 3000}
	wantKinds(t, edit(t, h, late, append(events, stall)...), map[string]int{})
	// Without it, the stale event shows the live epoch 2 offline, and the
	// stream still shows the superseded epoch 1 at its deadline.
	wantKinds(t, edit(t, h, late, events...), map[string]int{Lost: 1, Ghost: 1})
}

// TestCheckNetworkCut: a gateway that cannot hear another is excused
// from showing its sessions, until the heal + rejoin. In good.jsonl, gw2
// shows u1/phone (on gw1) offline from 5000 to 7000: a violation, unless
// gw2 was dropping what gw1 sent it meanwhile.
func TestCheckNetworkCut(t *testing.T) {
	h := mustRead(t, "testdata/good.jsonl")
	var offline []Record
	keep := func(r Record) bool {
		if r.K == KindObs && r.Src == "get" && r.GW == "gw2" && r.Sent >= 5000 && r.Sent <= 7000 {
			r.P = slices.Clone(r.P)
			for i := range r.P {
				if r.P[i].User == "u1" {
					r.P[i] = protocol.Presence{User: "u1", Status: "offline", Sessions: []protocol.SessionInfo{}, Version: r.P[i].Version}
				}
			}
			offline = append(offline, r)
			return false
		}
		return true
	}
	h = edit(t, h, keep)
	cut := []Record{
		{T: 4900, K: KindNet, Ev: "drop", GW: "gw2", GWs: []string{"gw1"}, Detail: "in p=1.00"},
		{T: 7000, K: KindNet, Ev: "heal", GW: "gw2"},
	}
	wantKinds(t, edit(t, h, nil, append(offline, cut...)...), map[string]int{})
	wantKinds(t, edit(t, h, nil, offline...), map[string]int{Lost: 1})
}

// TestCheckJustJoined: a client shown offline by a gateway that became
// ready within the just-joined bound (4351ms here) is a joined violation,
// not only a lost one. In good.jsonl, gw2 is ready at 0; here it shows
// u1/phone (on gw1) offline from 5000 to 7000, and is ready at 0 (lost) or
// at 2000 (joined: 3000ms before).
func TestCheckJustJoined(t *testing.T) {
	h := mustRead(t, "testdata/good.jsonl")
	var offline []Record
	keep := func(r Record) bool {
		if r.K == KindObs && r.Src == "get" && r.GW == "gw2" && r.Sent >= 5000 && r.Sent <= 7000 {
			r.P = slices.Clone(r.P)
			for i := range r.P {
				if r.P[i].User == "u1" {
					r.P[i] = protocol.Presence{User: "u1", Status: "offline", Sessions: []protocol.SessionInfo{}, Version: r.P[i].Version}
				}
			}
			offline = append(offline, r)
			return false
		}
		return true
	}
	h = edit(t, h, keep)
	wantKinds(t, edit(t, h, nil, offline...), map[string]int{Lost: 1})
	late := func(r Record) bool { return !(r.K == KindGW && r.GW == "gw2" && r.Ev == "ready") }
	ready := Record{T: 2000, K: KindGW, GW: "gw2", Life: 1, Ev: "ready"}
	wantKinds(t, edit(t, h, late, append(offline, ready)...), map[string]int{Joined: 1})
}

// TestSettleCountsADeathBetweenHelloAndWelcome: a gateway SIGTERMed after a
// hello was sent but before it welcomed it still drains that session: it
// closes the connection at once but holds the session online for the drain
// grace, so the session is bounded by the SIGTERM's rules (at the latest
// its crash expiry), not by the close + propagation.
func TestSettleCountsADeathBetweenHelloAndWelcome(t *testing.T) {
	b := boundsMS{prop: 1862, crash: 3110, recovery: 2260, drain: 2000, timeout: 2000, grace: 500}
	settled := func(termAt float64) *connModel {
		m := &model{b: b, stop: 60_000, gw: map[string]*gwModel{
			"gw3": {deaths: []downEvent{{at: termAt, ready: inf, exit: termAt + 2100, kind: "term"}}},
		}}
		c := &connModel{gw: "gw3", welcomed: true, helloSent: 1000, helloT: 1010,
			silentAt: inf, closeAt: inf, byeSent: inf, endT: termAt + 10, endLine: 7, endReason: "eof"}
		m.settle(c)
		return c
	}
	// SIGTERM 0.2 ms after the hello was sent, 10 ms before its welcome.
	c := settled(1000.2)
	if want := 1000.2 + b.crash; c.deadline < want {
		t.Errorf("deadline %.1f (%s), want at least SIGTERM + crash expiry = %.1f", c.deadline, c.deadlineWhy, want)
	}
	if !strings.Contains(c.deadlineWhy, "term") {
		t.Errorf("deadline's cause %q does not name the SIGTERM", c.deadlineWhy)
	}
	// A SIGTERM before the hello was sent is not this session's death.
	if c := settled(999); strings.Contains(c.deadlineWhy, "term") {
		t.Errorf("a SIGTERM before the hello was sent bounds the session: %q", c.deadlineWhy)
	}
}

// TestCheckShortPauseNotExcused: a pause of a session's gateway that the
// peer lease rides out excuses nothing on the other gateways. In
// good.jsonl gw2 (u2/phone's gateway) is paused 1500..2500; gw1 is made
// to answer a get sent at 2400 with u2 offline. With
// agents whose lease is the
// 2s timeout the pause is longer than the lease rides out, and excused;
// with the default 3.5s peer lease (2s pauses) it is a lost session
// (counted as joined: gw1 is within its just-joined bound, 6.2s, in this
// short history).
func TestCheckShortPauseNotExcused(t *testing.T) {
	for _, tc := range []struct {
		leaseMS float64
		want    map[string]int
	}{{0, map[string]int{}}, {3500, map[string]int{Joined: 1}}} {
		h, err := ReadHistoryFile("testdata/good.jsonl")
		if err != nil {
			t.Fatal(err)
		}
		for i := range h.Records {
			r := &h.Records[i]
			if r.K == KindRun {
				r.Run.PeerLeaseMS = tc.leaseMS
			}
		}
		h.Records = append(h.Records, Record{T: 2403, K: KindObs, GW: "gw1", Life: 1, Src: "get", C: 20, Sent: 2400,
			P: []protocol.Presence{{User: "u2", Status: "offline", Version: 103}}})
		h.Lines = append(h.Lines, 1000)
		if got := Check(h).Kinds(); !maps.Equal(got, tc.want) {
			t.Errorf("peer lease %vms: violations %v, want %v", tc.leaseMS, got, tc.want)
		}
	}
}
