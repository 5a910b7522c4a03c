package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rollcall/rollcall/bench"
	"github.com/rollcall/rollcall/node"
)

// `hbgen bench` takes the flags bench-compare gives `rollcall bench`, and
// refuses those of the work it does not do rather than measure less.
func TestParseBenchTakesRollcallBenchFlags(t *testing.T) {
	args := strings.Fields("--addrs 127.0.0.1:1,127.0.0.1:2 --sessions 500 --procs 2 --connect-rate 2000" +
		" --heartbeat 200ms --status-rate 0 --subscribers 0 --watch 1000 --silent-failures 0 --silent-after 1s" +
		" --probe-rate 0 --warmup 5s --duration 30s --pids 7,8 --format json")
	c, err := parseBench(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.addrs) != 2 || c.sessions != 500 || c.heartbeat != 200*time.Millisecond || len(c.pids) != 2 || c.pids[1] != 8 {
		t.Fatalf("parsed %+v", c)
	}
	for _, bad := range []string{"--status-rate 10", "--subscribers 100", "--silent-failures 3", "--probe-rate 20", "--format text", "--pids x", "--sessions 0"} {
		if _, err := parseBench(strings.Fields(bad), io.Discard); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

// The raw load spreads its sessions over the gateways, heartbeats them,
// and reports what they were sent and the servers' CPU and RSS in a
// `rollcall bench` report bench-compare reads.
func TestBenchHeartbeatsEveryGateway(t *testing.T) {
	var gws []*node.Node
	var addrs []string
	for i := range 2 {
		cfg := node.DefaultConfig()
		cfg.Name, cfg.ClientAddr, cfg.Dev = "g"+strconv.Itoa(i), "127.0.0.1:0", true
		gw, err := node.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := gw.Start(); err != nil {
			t.Fatal(err)
		}
		defer gw.Close()
		gws = append(gws, gw)
		addrs = append(addrs, gw.ClientAddr().String())
	}
	c, err := parseBench([]string{"--addrs", strings.Join(addrs, ","), "--sessions", "40", "--connect-rate", "2000",
		"--heartbeat", "20ms", "--warmup", "100ms", "--duration", "500ms", "--pids", strconv.Itoa(os.Getpid()), "--src", "127.0.0.1", "--ips", "1"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := runBench(t.Context(), c, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	var rep bench.Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("report %q: %v", out.String(), err)
	}
	if rep.Sessions.Requested != 40 || rep.Sessions.Established != 40 || rep.Sessions.Failed != 0 {
		t.Fatalf("sessions %+v", rep.Sessions)
	}
	if rep.Duration <= 0 || rep.Heartbeats.Sent == 0 || rep.Heartbeats.IntervalMS != 20 {
		t.Fatalf("window %v s, heartbeats %+v", rep.Duration, rep.Heartbeats)
	}
	if rep.Server.CPUCoreSeconds == nil || rep.Server.RSSAfterConnectBytes == 0 {
		t.Fatalf("server %+v", rep.Server)
	}
	// The gateways counted at least the window's heartbeats (the warmup's
	// too); the last ones written may still be on their way.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var got uint64
		for _, gw := range gws {
			got += gw.Metrics().Requests["hb"]
		}
		if got >= rep.Heartbeats.Sent {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gateways counted %d heartbeats, the report says %d were sent in the window", got, rep.Heartbeats.Sent)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// runBench closed its sessions; until then each gateway held half.
	for _, gw := range gws {
		if n := gw.Metrics().Requests["hello"]; n != 20 {
			t.Errorf("%s: %d hellos, want 20", gw.Name(), n)
		}
	}
}
