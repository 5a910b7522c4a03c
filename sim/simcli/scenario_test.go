package simcli

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rollcall/rollcall/internal/testkit"
	"github.com/rollcall/rollcall/sim"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the golden outputs in testdata/sim/ (from the module root)")

// scenarioCase is one command of a scenario file and its expected output.
type scenarioCase struct {
	comment []string
	args    string
	want    string
	line    int
}

// Scenario files (testdata/sim/*.txt from the module root) hold cases of the form
//
//	# what the case shows
//	run --nodes 16 --crash 3@10s ...
//	----
//	the expected table output
//	<blank line>
//
// The arguments are `rollcall sim` flags. Run with -rewrite to record the
// current output as expected.
func parseScenarios(t *testing.T, path string) []scenarioCase {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var cases []scenarioCase
	var cur scenarioCase
	var comment []string
	sc := bufio.NewScanner(f)
	line := 0
	state := 0 // 0 header, 1 expecting ----, 2 output
	var out []string
	for sc.Scan() {
		line++
		l := sc.Text()
		switch state {
		case 0:
			switch {
			case strings.HasPrefix(l, "#") || strings.TrimSpace(l) == "":
				comment = append(comment, l)
			case strings.HasPrefix(l, "run "):
				cur = scenarioCase{comment: comment, args: strings.TrimPrefix(l, "run "), line: line}
				comment = nil
				state = 1
			default:
				t.Fatalf("%s:%d: want '# comment' or 'run ARGS', got %q", path, line, l)
			}
		case 1:
			if l != "----" {
				t.Fatalf("%s:%d: want ----", path, line)
			}
			state, out = 2, nil
		case 2:
			if l == "" {
				cur.want = strings.Join(out, "\n")
				cases = append(cases, cur)
				state = 0
				continue
			}
			out = append(out, l)
		}
	}
	if state == 2 {
		cur.want = strings.Join(out, "\n")
		cases = append(cases, cur)
	} else if state == 1 {
		t.Fatalf("%s: last case has no ----", path)
	}
	return cases
}

func runScenario(args string) (string, error) {
	o, err := ParseArgs(strings.Fields(args), io.Discard)
	if err != nil {
		return "", err
	}
	runs, err := o.Runs()
	if err != nil {
		return "", err
	}
	var rows []Row
	for i, cfg := range runs {
		// Small scenarios also check the simulator's indexes against the
		// real code after every event.
		cfg.Check = cfg.Nodes <= 16
		res, err := sim.Run(context.Background(), cfg)
		if err != nil {
			return "", err
		}
		row := Row{Result: res}
		if o.SweepParam != "" {
			row.Sweep, row.Value = o.SweepParam, o.SweepValues[i]
		}
		rows = append(rows, row)
	}
	var b bytes.Buffer
	if err := WriteTable(&b, rows); err != nil {
		return "", err
	}
	return strings.TrimRight(b.String(), "\n"), nil
}

// TestScenarios runs every scenario file and compares each case's table
// with its golden. A run of the simulator is one goroutine and
// deterministic, so the race detector has nothing to find in it while
// slowing it several times over (the 16-node cases also check every index
// after every event): under -race the test is skipped, and `make test`
// runs it in a command of its own without -race.
func TestScenarios(t *testing.T) {
	if testkit.RaceEnabled && !*rewrite {
		t.Skip("single-goroutine, deterministic simulator runs: checked without -race (make test runs go test -run '^TestScenarios$' ./sim/simcli)")
	}
	files, err := filepath.Glob("../../testdata/sim/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenario files: %v", err)
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			t.Parallel()
			cases := parseScenarios(t, path)
			var out bytes.Buffer
			for _, c := range cases {
				got, err := runScenario(c.args)
				if err != nil {
					got = "error: " + err.Error()
				}
				if !*rewrite && got != c.want {
					t.Errorf("%s:%d: run %s\n--- got\n%s\n--- want\n%s", path, c.line, c.args, got, c.want)
				}
				for _, l := range c.comment {
					fmt.Fprintln(&out, l)
				}
				fmt.Fprintf(&out, "run %s\n----\n%s\n\n", c.args, got)
			}
			if *rewrite {
				if err := os.WriteFile(path, bytes.TrimRight(out.Bytes(), "\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
