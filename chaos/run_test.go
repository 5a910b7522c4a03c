package chaos

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rollcall/rollcall/internal/testkit"
)

func TestParseSeeds(t *testing.T) {
	for in, want := range map[string][]uint64{
		"42":        {42},
		"1..3":      {1, 2, 3},
		"3,7 9..10": {3, 7, 9, 10},
		"":          nil,
	} {
		got, err := ParseSeeds(in)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("ParseSeeds(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"x", "3..1", "1..y"} {
		if _, err := ParseSeeds(bad); err == nil {
			t.Errorf("ParseSeeds(%q) accepted", bad)
		}
	}
}

// TestSchedule: the same seed gives the same schedule; faults do not
// overlap, fit the window, and leave a gateway running.
func TestSchedule(t *testing.T) {
	const window = 40 * time.Second
	for seed := uint64(1); seed <= 50; seed++ {
		a, b := Schedule(seed, 4, window, seed%2 == 0), Schedule(seed, 4, window, seed%2 == 0)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("seed %d: two schedules differ", seed)
		}
		end := time.Duration(0)
		for _, f := range a {
			if f.At < end || f.At+f.length() > window {
				t.Fatalf("seed %d: %v overlaps the previous fault or leaves the window", seed, f)
			}
			if len(f.GWs) >= 4 && f.Kind != FaultKillRestart {
				t.Fatalf("seed %d: %v takes every gateway", seed, f)
			}
			end = f.At + f.length()
		}
	}
}

func TestBounds(t *testing.T) {
	b := DeriveBounds(500*time.Millisecond, 2*time.Second, 0)
	for name, got := range map[string]time.Duration{
		"sweep": b.Sweep, "lease check": b.LeaseCheck, "alive": b.Alive, "propagation": b.Propagation,
		"silent": b.SilentExpiry, "crash": b.CrashExpiry, "recovery": b.Recovery, "convergence": b.Convergence,
		"just joined": b.JustJoined, "pause": b.PauseTolerance,
	} {
		want := map[string]time.Duration{
			"sweep": 200 * time.Millisecond, "lease check": 175 * time.Millisecond, "alive": 500 * time.Millisecond,
			"propagation": 2051500 * time.Microsecond, "silent": 4251500 * time.Microsecond, "crash": 4676 * time.Millisecond,
			"recovery": 2551 * time.Millisecond, "convergence": 6726 * time.Millisecond,
			"just joined": 6226 * time.Millisecond, "pause": 2 * time.Second,
		}[name]
		if got != want {
			t.Errorf("%s = %v, want %v (docs/chaos.md states it)", name, got, want)
		}
	}
	cfg := DefaultConfig()
	cfg.Duration, cfg.Bin = 20*time.Second, "x"
	if err := cfg.Validate(); err != nil {
		t.Fatalf("20s (the CI run) must be long enough: %v", err)
	}
	cfg.Duration = 8 * time.Second
	if err := cfg.Validate(); err == nil {
		t.Fatal("8s leaves no room for faults and was accepted")
	}
}

// TestChaos runs one seed of the harness against real agents when
// CHAOS_DURATION is set (CHAOS_SEEDS: its first seed, default 1;
// CHAOS_GATEWAYS), and skips otherwise, so that make test stays fast.
func TestChaos(t *testing.T) {
	d := os.Getenv("CHAOS_DURATION")
	if d == "" {
		t.Skip("set CHAOS_DURATION (e.g. 20s) to run a seed against real agents")
	}
	dur, err := time.ParseDuration(d)
	if err != nil {
		t.Fatal(err)
	}
	seed := uint64(1)
	if s := os.Getenv("CHAOS_SEEDS"); s != "" {
		seeds, err := ParseSeeds(s)
		if err != nil || len(seeds) == 0 {
			t.Fatalf("CHAOS_SEEDS %q: %v", s, err)
		}
		seed = seeds[0]
	}
	cfg := DefaultConfig()
	cfg.Seed, cfg.Duration = seed, dur
	if g := os.Getenv("CHAOS_GATEWAYS"); g != "" {
		if cfg.Gateways, err = strconv.Atoi(g); err != nil {
			t.Fatal(err)
		}
	}
	cfg.Bin = testkit.BuildRollcall(t)
	cfg.Command = "CHAOS_DURATION=" + d + " CHAOS_SEEDS=" + strconv.FormatUint(seed, 10) + " go test -run TestChaos ./chaos"
	ctx, cancel := context.WithTimeout(context.Background(), dur+2*time.Minute)
	defer cancel()
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(res.Summary())
	if len(res.Violations) > 0 {
		h, err := ReadHistoryFile(filepath.Join(res.Dir, "history.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		var s strings.Builder
		Check(h).Write(&s)
		t.Fatalf("%s\n%s\nrun directory %s; replay: %s", res.Summary(), s.String(), res.Dir, cfg.Command)
	}
	os.RemoveAll(res.Dir)
}
