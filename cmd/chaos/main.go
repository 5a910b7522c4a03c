// Command chaos runs the chaos harness of package chaos against real
// rollcall agents, seed after seed, or checks a saved history:
//
//	chaos [--seeds 1..20] [--duration 60s] [--gateways 3] [--netns] [--bin bin/rollcall]
//	chaos check history.jsonl
//
// Each seed ends with one summary line; a seed with violations prints
// them, keeps its run directory and the command that replays it. The exit
// status is 1 if any seed had a violation. Flags default from CHAOS_SEEDS,
// CHAOS_DURATION, CHAOS_GATEWAYS and CHAOS_NETNS. See docs/chaos.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/rollcall/rollcall/chaos"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, errViolations) {
			fmt.Fprintln(os.Stderr, "chaos:", err)
		}
		os.Exit(1)
	}
}

var errViolations = errors.New("violations found")

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "check" {
		return runCheck(args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	seeds := fs.String("seeds", os.Getenv("CHAOS_SEEDS"), "seeds: 42, 1..20 or 3,7,9 (default: one from the clock) [CHAOS_SEEDS]")
	duration := fs.Duration("duration", envDuration("CHAOS_DURATION", 60*time.Second), "length of each seed's run [CHAOS_DURATION]")
	gateways := fs.Int("gateways", envInt("CHAOS_GATEWAYS", 3), "agents per run, 3 to 5 [CHAOS_GATEWAYS]")
	users := fs.Int("users", 40, "workload users (one or two devices each)")
	bin := fs.String("bin", "bin/rollcall", "the rollcall binary (built with go build ./cmd/rollcall if missing)")
	dir := fs.String("dir", "", "parent of the run directories (default: the system's temporary directory)")
	keep := fs.Bool("keep", false, "keep the run directory of a passing seed too")
	slack := fs.Duration("slack", chaos.DefaultSlack, "loaded-machine allowance in every bound")
	grace := fs.Duration("disconnect-grace", chaos.DefaultConfig().DisconnectGrace, "the agents' --disconnect-grace (0: none); the bounds include it")
	netns := fs.Bool("netns", os.Getenv("CHAOS_NETNS") != "", "network faults too: agents in network namespaces, partitions, one-way cuts, loss (root, ip, iptables) [CHAOS_NETNS]")
	show := fs.Int("show", 30, "violations printed in full per seed (all are in the run directory's violations.txt)")
	verbose := fs.Bool("v", false, "progress lines (members at stop, run directory)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	var list []uint64
	if *seeds == "" {
		list = []uint64{uint64(time.Now().UnixNano()%1_000_000) + 1}
		fmt.Fprintf(stdout, "no seeds given: seed %d from the clock\n", list[0])
	} else {
		var err error
		if list, err = chaos.ParseSeeds(*seeds); err != nil {
			return err
		}
	}
	if _, err := os.Stat(*bin); err != nil {
		fmt.Fprintf(stdout, "building %s\n", *bin)
		if out, err := exec.Command("go", "build", "-o", *bin, "./cmd/rollcall").CombinedOutput(); err != nil {
			return fmt.Errorf("go build: %v\n%s", err, out)
		}
	}
	absBin, err := filepath.Abs(*bin)
	if err != nil {
		return err
	}
	b := chaos.DeriveBounds(500*time.Millisecond, 2*time.Second, *slack).WithDisconnectGrace(*grace)
	fmt.Fprint(stdout, b.Describe())
	failed := 0
	for _, seed := range list {
		if ctx.Err() != nil {
			break
		}
		replay := fmt.Sprintf("go run ./cmd/chaos --seeds %d --duration %v --gateways %d --users %d", seed, *duration, *gateways, *users)
		if *slack != chaos.DefaultSlack {
			replay += " --slack " + slack.String()
		}
		if *netns {
			replay += " --netns"
		}
		if *grace != chaos.DefaultConfig().DisconnectGrace {
			replay += " --disconnect-grace " + grace.String()
		}
		cfg := chaos.DefaultConfig()
		cfg.Seed, cfg.Duration, cfg.Gateways, cfg.Users, cfg.Bin, cfg.Slack = seed, *duration, *gateways, *users, absBin, *slack
		cfg.Command, cfg.Netns = replay, *netns
		cfg.DisconnectGrace = *grace
		if *grace == 0 {
			cfg.DisconnectGrace = -1 // Config's zero is its default
		}
		if *dir != "" {
			cfg.Dir = filepath.Join(*dir, fmt.Sprintf("seed-%d-%s", seed, time.Now().Format("150405")))
		}
		if *verbose {
			cfg.Log = stdout
		}
		res, err := chaos.Run(ctx, cfg)
		if err != nil {
			failed++
			if res != nil {
				fmt.Fprintf(stdout, "seed %d: %v (run directory %s)\n", seed, err, res.Dir)
			} else {
				fmt.Fprintf(stdout, "seed %d: %v\n", seed, err)
			}
			continue
		}
		fmt.Fprintln(stdout, res.Summary())
		if len(res.Violations) == 0 {
			if !*keep {
				os.RemoveAll(res.Dir)
			}
			continue
		}
		failed++
		h, err := chaos.ReadHistoryFile(filepath.Join(res.Dir, "history.jsonl"))
		if err == nil {
			rep := chaos.Check(h)
			rep.WriteFirst(stdout, *show)
			if f, err := os.Create(filepath.Join(res.Dir, "violations.txt")); err == nil {
				rep.Write(f)
				f.Close()
			}
		}
		fmt.Fprintf(stdout, "seed %d: run directory %s (history.jsonl, violations.txt, gw*.log)\n", seed, res.Dir)
		fmt.Fprintf(stdout, "seed %d: replay with: %s\n", seed, replay)
		fmt.Fprintf(stdout, "seed %d: check again with: go run ./cmd/chaos check %s\n", seed, filepath.Join(res.Dir, "history.jsonl"))
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if failed > 0 {
		fmt.Fprintf(stdout, "%d of %d seeds failed\n", failed, len(list))
		return errViolations
	}
	return nil
}

// runCheck checks saved histories.
func runCheck(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("chaos check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return errors.New("usage: chaos check HISTORY.jsonl [more]")
	}
	bad := false
	for _, path := range fs.Args() {
		h, err := chaos.ReadHistoryFile(path)
		if err != nil {
			return err
		}
		rep := chaos.Check(h)
		rep.Write(stdout)
		fmt.Fprintf(stdout, "%s: %d faults, %d sessions, %d ops, %d violations %v\n", path, rep.Faults, rep.Sessions, rep.Ops, len(rep.Violations), rep.Kinds())
		bad = bad || len(rep.Violations) > 0
	}
	if bad {
		return errViolations
	}
	return nil
}

func envDuration(name string, def time.Duration) time.Duration {
	if v := os.Getenv(name); v != "" {
		if d, err := time.ParseDuration(v); err == nil {
			return d
		}
	}
	return def
}

func envInt(name string, def int) int {
	if v := os.Getenv(name); v != "" {
		if n, err := strconv.Atoi(v); err == nil {
			return n
		}
	}
	return def
}
