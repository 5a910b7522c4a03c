package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestAgentServesMetrics runs the agent in a one-member cluster and
// scrapes GET /metrics without any credentials, as Prometheus does: the
// node's, the cluster's, memberlist's and the runtime's metrics are there,
// and a session shows.
func TestAgentServesMetrics(t *testing.T) {
	addr, httpAddr, gossipAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	ctx, stop := context.WithCancel(t.Context())
	agentDone := make(chan error, 1)
	go func() {
		agentDone <- runAgent(ctx, []string{"--name", "gw1", "--client-addr", addr, "--http-addr", httpAddr,
			"--gossip-addr", gossipAddr, "--gossip-profile", "local", "--dev", "--log-level", "error"}, io.Discard, io.Discard)
	}()
	defer func() {
		stop()
		if err := <-agentDone; err != nil {
			t.Errorf("agent: %v", err)
		}
	}()
	waitDial(t, addr)
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	fmt.Fprintln(nc, `{"op":"hello","user":"alice","device":"phone"}`)
	if line, err := bufio.NewReader(nc).ReadString('\n'); err != nil || !strings.Contains(line, `"welcome"`) {
		t.Fatalf("hello: %q %v", line, err)
	}

	var body string
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + httpAddr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
			t.Fatalf("GET /metrics: %s %s", resp.Status, resp.Header.Get("Content-Type"))
		}
		body = string(b)
		// memberlist times each gossip round (every 100ms with the local
		// profile), alone or not.
		if (strings.Contains(body, "\nrollcall_memberlist_gossip_seconds_count ") &&
			!strings.Contains(body, "\nrollcall_memberlist_gossip_seconds_count 0\n")) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, want := range []string{
		`rollcall_sessions{owner="local",state="active"} 1`,
		`rollcall_sessions_opened_total 1`,
		`rollcall_requests_total{op="hello"} 1`,
		`rollcall_gossip_members{state="alive"} 1`,
		`rollcall_memberlist_health_score 0`,
		`rollcall_memberlist_members{node_state="suspect"} 0`,
		`rollcall_propagation_lag_seconds_bucket{le="+Inf"} 0`,
		"rollcall_memberlist_gossip_seconds_count ",
		"go_goroutines ",
		"process_open_fds ",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}
