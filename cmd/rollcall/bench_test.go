package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rollcall/rollcall/bench"
	"github.com/rollcall/rollcall/internal/testkit"
)

// TestBenchAgainstTwoAgents runs `rollcall bench` over two generator
// processes against two gossip-joined --dev agent processes for a 2s
// window, and checks that its JSON report holds together: every session
// established, heartbeats sent and counted by the servers, propagation
// measured, the agents found as the server processes.
func TestBenchAgainstTwoAgents(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs four processes")
	}
	bin := testkit.BuildRollcall(t)
	agents := startAgents(t, bin, 2, "--timeout", "1s", "--heartbeat", "200ms")
	waitAlive(t, agents, 10*time.Second)
	cmd := exec.Command(bin, "bench", "--dev", "--addrs", agents[0].client+","+agents[1].client,
		"--http-addrs", agents[0].http+","+agents[1].http, "--sessions", "50", "--procs", "2", "--connect-rate", "500",
		"--status-rate", "50", "--subscribers", "4", "--silent-failures", "2", "--silent-after", "1ms",
		"--duration", "2s", "--format", "json")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("rollcall bench: %v\n%s", err, stderr.String())
	}
	var rep bench.Report
	d := json.NewDecoder(&stdout)
	if err := d.Decode(&rep); err != nil {
		t.Fatalf("report: %v", err)
	}
	if rep.Sessions.Established != 50 || rep.Sessions.Failed != 0 || rep.Connect.Count != 50 {
		t.Errorf("sessions %+v", rep.Sessions)
	}
	if rep.Heartbeats.Sent == 0 || rep.Heartbeats.ServerPerSec == nil || *rep.Heartbeats.ServerPerSec <= 0 {
		t.Errorf("heartbeats %+v", rep.Heartbeats)
	}
	if rep.StatusChanges.OK == 0 || rep.Request.Count != rep.StatusChanges.OK {
		t.Errorf("status changes %+v, request %+v", rep.StatusChanges, rep.Request)
	}
	if rep.Propagation.Count == 0 || rep.Propagation.P50 <= 0 {
		t.Errorf("propagation %+v", rep.Propagation)
	}
	if rep.Offline.Silent != 2 || rep.Offline.TimeoutMS != 1000 ||
		(rep.Offline.Detected > 0 && rep.Offline.Detection.Max < 1000) {
		t.Errorf("offline %+v", rep.Offline)
	}
	var pids []int
	for _, a := range agents {
		pids = append(pids, a.cmd.Process.Pid)
	}
	slices.Sort(rep.Server.PIDs)
	slices.Sort(pids)
	if !slices.Equal(rep.Server.PIDs, pids) || rep.Server.CPUCoreSeconds == nil || rep.Server.RSSAfterConnectBytes <= 0 {
		t.Errorf("server %+v, want the agents %v", rep.Server, pids)
	}
	if rep.Gossip.Bytes == nil || *rep.Gossip.Bytes <= 0 {
		t.Errorf("gossip %+v", rep.Gossip)
	}
	if rest, _ := io.ReadAll(d.Buffered()); len(bytes.TrimSpace(rest)) > 0 {
		t.Errorf("more than the report on stdout: %q", rest)
	}
}

// TestBenchTracked runs `rollcall bench --tracked` against a --dev agent
// process and checks its report: every session tracked, the agent's
// memory and CPU sampled, and all of them ended after the backend closed.
func TestBenchTracked(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs an agent")
	}
	bin := testkit.BuildRollcall(t)
	agents := startAgents(t, bin, 1, "--timeout", "2s", "--heartbeat", "500ms")
	waitAlive(t, agents, 10*time.Second)
	cmd := exec.Command(bin, "bench", "--dev", "--addrs", agents[0].client, "--http-addrs", agents[0].http,
		"--tracked", "5000", "--duration", "500ms", "--format", "json")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("rollcall bench --tracked: %v\n%s", err, stderr.String())
	}
	var rep bench.TrackedReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("report %q: %v", stdout.String(), err)
	}
	if rep.Sessions != 5000 || rep.Refused != 0 || rep.RSSAfterBytes <= 0 || rep.HeapPerSession <= 0 || rep.EndSeconds <= 0 {
		t.Errorf("report %+v", rep)
	}
}

func TestBenchFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--addrs", "127.0.0.1:1"}, "--secret-file"},
		{[]string{"--dev", "--format", "xml"}, "--format"},
		{[]string{"--dev", "--sessions", "0"}, "--sessions"},
		{[]string{"--dev", "--pids", "abc"}, "--pids"},
		{[]string{"--dev", "--transport", "udp"}, "transport"},
		{[]string{"--dev", "stray"}, "unexpected"},
		{[]string{"--dev", "--tracked", "-1"}, "--tracked"},
	} {
		err := runBench(t.Context(), tc.args, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error mentioning %s", tc.args, err, tc.want)
		}
	}
}
