package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/rollcall/rollcall/gossip"
	"github.com/rollcall/rollcall/internal/testkit"
	"github.com/rollcall/rollcall/protocol"
)

func TestDrainAndAdvertiseFlags(t *testing.T) {
	config := func(args ...string) (string, error) {
		af := defaultAgentConfig()
		fs, _ := agentFlagSet(&af, io.Discard)
		if err := parseFlags(fs, append([]string{"--dev", "--name", "n"}, args...), nil); err != nil {
			t.Fatal(err)
		}
		cfg, err := af.nodeConfig(zap.NewNop())
		return cfg.DrainGrace.String() + " " + cfg.ClientAdvertise, err
	}
	if got, err := config(); err != nil || got != "2s " {
		t.Fatalf("defaults: %q %v", got, err)
	}
	if got, err := config("--drain-grace", "500ms", "--drain-timeout", "1s", "--client-advertise", "gw1.example:7400"); err != nil ||
		got != (500*time.Millisecond).String()+" gw1.example:7400" {
		t.Fatalf("set: %q %v", got, err)
	}
	if _, err := config("--drain-timeout", "1s"); err == nil || !strings.Contains(err.Error(), "drain grace") {
		t.Fatalf("the default grace with --drain-timeout 1s: %v", err)
	}
	if _, err := config("--client-advertise", "0.0.0.0:7400"); err == nil || !strings.Contains(err.Error(), "unspecified") {
		t.Fatalf("an unspecified --client-advertise: %v", err)
	}
}

// An agent run with --client-advertise publishes that address in the
// member list and in locate, and a first agent (no --join) is ready.
func TestAgentAdvertisesClientAddr(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs an agent")
	}
	agents := startAgents(t, testkit.BuildRollcall(t), 1, "--client-advertise", "gw1.example:7400")
	agent := &agentClient{addr: agents[0].http, scheme: "http", http: &http.Client{}}
	// The agent answers dials before it has finished starting (its
	// client listener comes first); a first agent then turns ready on its
	// own, with no member to join.
	testkit.WaitFor(t, 10*time.Second, "/readyz of a first agent to answer ready", func() bool {
		var ready map[string]string
		err := agent.call(t.Context(), "GET", "/readyz", nil, &ready)
		return err == nil && ready["status"] == "ready"
	})
	var ms []gossip.Member
	if err := agent.call(t.Context(), "GET", "/v1/members", nil, &ms); err != nil {
		t.Fatal(err)
	}
	if len(ms) != 1 || ms[0].ClientAddr != "gw1.example:7400" {
		t.Fatalf("members %+v", ms)
	}
	c := testkit.DialLine(t, agents[0].client, "alice", "phone", nil)
	c.Send(map[string]any{"op": "locate", "user": "alice", "id": 1})
	ss, _ := c.Expect("locate", replyWithin)["sessions"].([]any)
	if len(ss) != 1 || ss[0].(map[string]any)["gateway_addr"] != "gw1.example:7400" {
		t.Fatalf("locate %v", ss)
	}
}

func TestConnectShowsTheOtherGateways(t *testing.T) {
	got := formatReply(&protocol.ErrorFrame{Op: protocol.OpError, Code: protocol.CodeShuttingDown, Message: "bye", Gateways: []string{"10.0.0.2:7400", "10.0.0.3:7400"}})
	if got != "error shutting_down: bye (other gateways: 10.0.0.2:7400, 10.0.0.3:7400)" {
		t.Fatal(got)
	}
}
