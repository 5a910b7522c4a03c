package chaos

import (
	"maps"
	"path/filepath"
	"strings"
	"testing"
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
