package compare

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rollcall/rollcall/bench"
)

// floorRun is a round's propagation floor (Config.Floor): its relay
// nodes, pinned to the server CPUs beside the system but not counted in
// its CPU, and the TCP addresses the probe connects to.
type floorRun struct {
	system
}

// startNodes starts cfg.Gateways floor nodes and waits until they accept.
func (f *floorRun) startNodes(ctx context.Context, cfg Config, round int) error {
	var tcp, udp []string
	for range cfg.Gateways {
		pt, err := cfg.ports.freePort()
		if err != nil {
			return err
		}
		pu, err := cfg.ports.freePort()
		if err != nil {
			return err
		}
		tcp = append(tcp, "127.0.0.1:"+strconv.Itoa(pt))
		udp = append(udp, "127.0.0.1:"+strconv.Itoa(pu))
	}
	for i := range tcp {
		peers := slices.Concat(udp[:i], udp[i+1:])
		argv := append(slices.Clone(cfg.FloorCommand), "node", "--tcp", tcp[i], "--udp", udp[i], "--peers", strings.Join(peers, ","))
		if err := f.start(cfg, fmt.Sprintf("floor%d", i+1), round, argv...); err != nil {
			return err
		}
	}
	for _, a := range tcp {
		if err := waitTCP(ctx, a); err != nil {
			return fmt.Errorf("floor node: %w", err)
		}
	}
	f.addrs = tcp
	return nil
}

// floorWindow is when, after the load starts, the floor probe starts,
// and for how long it runs: within the load's measured window, which
// follows its connects (at ConnectRate) and its warmup.
func floorWindow(cfg Config) (delay, length time.Duration) {
	connect := time.Duration(float64(cfg.Sessions) / cfg.ConnectRate * float64(time.Second))
	delay = connect + max(cfg.Warmup, 0) + time.Second
	return delay, max(cfg.Duration-2*time.Second, time.Second)
}

// startProbe starts the floor probe on the load CPUs, its JSON report to
// out.
func (f *floorRun) startProbe(cfg Config, round int, out *bytes.Buffer) (*exec.Cmd, error) {
	rate := cfg.ProbeRate
	if rate <= 0 {
		rate = 20
	}
	delay, length := floorWindow(cfg)
	argv := append(slices.Clone(cfg.FloorCommand), "probe", "--nodes", strings.Join(f.addrs, ","),
		"--rate", strconv.FormatFloat(rate, 'f', -1, 64), "--delay", delay.String(), "--duration", length.String())
	argv = pinned(cfg.LoadCPUs, argv)
	stderr, err := os.Create(filepath.Join(cfg.Dir, fmt.Sprintf("floor-probe-%d.log", round)))
	if err != nil {
		return nil, err
	}
	defer stderr.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = out, stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("floor probe: %w", err)
	}
	return cmd, nil
}

// report waits for the floor probe and reads its report.
func (f *floorRun) report(probe *exec.Cmd, out *bytes.Buffer) (*bench.FloorReport, error) {
	if err := probe.Wait(); err != nil {
		return nil, fmt.Errorf("floor probe: %w", err)
	}
	var r bench.FloorReport
	if err := json.Unmarshal(bytes.TrimSpace(out.Bytes()), &r); err != nil {
		return nil, fmt.Errorf("floor probe: its output is not a floor report: %w", err)
	}
	return &r, nil
}
