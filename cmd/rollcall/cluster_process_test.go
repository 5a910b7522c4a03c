package main

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rollcall/rollcall/gossip"
	"github.com/rollcall/rollcall/internal/testkit"
)

// TestThreeAgentProcesses runs three real `rollcall agent` processes joined
// by gossip on loopback: connect on one, see it on another, route a message,
// kill -9 the owner, see the session offline on the survivors, reconnect
// elsewhere with a newer epoch, then leave gracefully.
func TestThreeAgentProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs three processes")
	}
	const timeout = 2 * time.Second
	agents := startAgents(t, testkit.BuildRollcall(t), 3, "--timeout", timeout.String(), "--heartbeat", "500ms")
	waitAlive(t, agents, 10*time.Second)

	bob := testkit.DialLine(t, agents[1].client, "bob", "laptop", nil)
	bob.Heartbeat(300 * time.Millisecond)
	bob.Send(map[string]any{"op": "sub", "users": []string{"alice"}, "id": 1})
	bob.Expect("ok", replyWithin)
	if ev := bob.Expect("event", replyWithin); ev["online"] != false {
		t.Fatalf("alice online before she connected: %v", ev)
	}
	alice := testkit.DialLine(t, agents[0].client, "alice", "phone", nil)
	alice.Heartbeat(300 * time.Millisecond)
	ev := bob.Expect("event", replyWithin)
	if ev["online"] != true {
		t.Fatalf("bob on gw2 did not see alice connect on gw1: %v", ev)
	}

	bob.Send(map[string]any{"op": "send", "to": "alice", "body": "hello from gw2", "id": 2})
	if ok := bob.Expect("ok", replyWithin); ok["delivered"] != float64(1) {
		t.Fatalf("send: %v", ok)
	}
	if m := alice.Expect("message", replyWithin); m["body"] != "hello from gw2" || m["from"] != "bob" {
		t.Fatalf("alice got %v", m)
	}

	carol := testkit.DialLine(t, agents[2].client, "carol", "web", nil)
	carol.Send(map[string]any{"op": "locate", "user": "alice", "id": 3})
	loc := carol.Expect("locate", replyWithin)
	ss, _ := loc["sessions"].([]any)
	if len(ss) != 1 || ss[0].(map[string]any)["gateway"] != "gw1" || ss[0].(map[string]any)["gateway_addr"] != agents[0].client {
		t.Fatalf("locate from gw3: %v", loc)
	}

	// kill -9 alice's gateway.
	killed := time.Now()
	if err := agents[0].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if ev := bob.Expect("event", timeout+10*time.Second); ev["online"] != false {
		t.Fatalf("after kill -9 of gw1: %v", ev)
	}
	t.Logf("kill -9 to offline at a subscriber on another node: %v (timeout %v)", time.Since(killed), timeout)

	// Alice reconnects on gw3 with her last epoch.
	last := alice.Welcome["epoch"].(float64)
	alice2 := testkit.DialLine(t, agents[2].client, "alice", "phone", map[string]any{"last_epoch": last})
	if ep := alice2.Welcome["epoch"].(float64); ep <= last {
		t.Fatalf("reconnect epoch %v, old %v", ep, last)
	}
	alice2.Heartbeat(300 * time.Millisecond)
	ev = bob.Expect("event", replyWithin)
	sess, _ := ev["sessions"].([]any)
	if ev["online"] != true || len(sess) != 1 || sess[0].(map[string]any)["gateway"] != "gw3" {
		t.Fatalf("after reconnect on gw3: %v", ev)
	}

	// rollcall leave on gw3: alice is told, bob sees her offline, the
	// process exits cleanly.
	left := time.Now()
	if err := runLeave(t.Context(), []string{"--http-addr", agents[2].http}, &syncBuffer{}, &syncBuffer{}); err == nil ||
		!strings.Contains(err.Error(), "401") {
		t.Fatalf("leave without the admin token: %v", err)
	}
	if err := runLeave(t.Context(), []string{"--http-addr", agents[2].http, "--admin-token-file", agents[2].adminTokenFile}, &syncBuffer{}, &syncBuffer{}); err != nil {
		t.Fatal(err)
	}
	if e := alice2.Expect("error", replyWithin); e["code"] != "shutting_down" {
		t.Fatalf("alice on leaving gw3 got %v", e)
	}
	if ev := bob.Expect("event", replyWithin); ev["online"] != false {
		t.Fatalf("after gw3 left: %v", ev)
	}
	t.Logf("graceful leave to offline at a subscriber: %v", time.Since(left))
	select {
	case err := <-agents[2].exited:
		if err != nil {
			t.Fatalf("gw3 exited with %v after leave", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("gw3 did not exit after leave")
	}
}

// Stopping every agent at once (docker compose stop sends SIGTERM to all)
// must let each drain and exit 0 well within its drain timeout, not wait
// for the others to relay its leave.
func TestAllAgentsStoppedAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs three processes")
	}
	const drain = 8 * time.Second
	agents := startAgents(t, testkit.BuildRollcall(t), 3, "--drain-timeout", drain.String())
	waitAlive(t, agents, 10*time.Second)
	for _, a := range agents {
		c := testkit.DialLine(t, a.client, "user-"+a.name, "phone", nil)
		c.Heartbeat(300 * time.Millisecond)
	}
	stopped := time.Now()
	for _, a := range agents {
		if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range agents {
		select {
		case err := <-a.exited:
			if err != nil {
				t.Errorf("%s exited with %v after SIGTERM", a.name, err)
			}
		case <-time.After(drain + 5*time.Second):
			t.Fatalf("%s did not exit within its drain timeout", a.name)
		}
	}
	t.Logf("all three exited %v after SIGTERM (drain timeout %v)", time.Since(stopped), drain)
}

// agentProc is a `rollcall agent` process started by a test.
type agentProc struct {
	name, client, http, gossip string
	adminTokenFile             string
	cmd                        *exec.Cmd
	exited                     chan error
}

// startAgents starts n agents gw1..gwN on loopback, gw2.. joining gw1, in
// development mode with local gossip timings and an admin token (one
// file for all), plus extra flags.
func startAgents(t *testing.T, bin string, n int, extra ...string) []*agentProc {
	t.Helper()
	var agents []*agentProc
	tokenFile := writeAdminToken(t)
	for i := 1; i <= n; i++ {
		a := &agentProc{name: fmt.Sprintf("gw%d", i), client: freeAddr(t), http: freeAddr(t), gossip: freeAddr(t),
			adminTokenFile: tokenFile, exited: make(chan error, 1)}
		args := []string{"agent", "--name", a.name, "--dev", "--client-addr", a.client, "--http-addr", a.http,
			"--gossip-addr", a.gossip, "--gossip-profile", "local", "--log-level", "warn", "--admin-token-file", tokenFile}
		if i > 1 {
			args = append(args, "--join", agents[0].gossip)
		}
		a.cmd = exec.Command(bin, append(args, extra...)...)
		a.cmd.Stderr = os.Stderr
		if err := a.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { a.exited <- a.cmd.Wait() }()
		t.Cleanup(func() { _ = a.cmd.Process.Kill() })
		agents = append(agents, a)
		waitDial(t, a.client)
	}
	return agents
}

// waitAlive waits until the last agent lists every agent alive.
func waitAlive(t *testing.T, agents []*agentProc, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		var ms []gossip.Member
		alive := 0
		agent := &agentClient{addr: agents[len(agents)-1].http, scheme: "http", http: &http.Client{}}
		if err := agent.call(t.Context(), "GET", "/v1/members", nil, &ms); err == nil {
			for _, m := range ms {
				if m.State == "alive" {
					alive++
				}
			}
		}
		if alive == len(agents) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %d alive members", len(agents))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// replyWithin bounds a process test's wait for a frame.
const replyWithin = 10 * time.Second
