package node_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/rollcall/rollcall/internal/testcluster"
	"github.com/rollcall/rollcall/node"
)

// The JavaScript client (jsclient/client.js) end to end, run by Node.js
// (its WebSocket is the browser's API) against two --dev gateways joined
// by real gossip. Skips where no node is installed.

const jsWait = 10 * time.Second

type jsGateway = testcluster.Gateway

// startJSCluster starts n gateways serving /ws, joined by gossip.
// jsModule returns the Node.js executable and the JavaScript client copied
// to a temporary .mjs file Node.js imports as a module, skipping the test
// where no node is installed.
func jsModule(t *testing.T) (nodeExe, module string) {
	t.Helper()
	nodeExe, err := exec.LookPath("node")
	if err != nil {
		t.Skip("SKIP: no node (Node.js 20 or newer) in PATH to run the JavaScript client")
	}
	src, err := os.ReadFile(filepath.Join("jsclient", "client.js"))
	if err != nil {
		t.Fatal(err)
	}
	module = filepath.Join(t.TempDir(), "client.mjs")
	if err := os.WriteFile(module, src, 0o600); err != nil {
		t.Fatal(err)
	}
	return nodeExe, module
}

func startJSCluster(t *testing.T, n int) []*jsGateway {
	return testcluster.Start(t, n, testcluster.Options{HTTP: true, Timeout: 3 * time.Second, Heartbeat: 300 * time.Millisecond})
}

func jsWaitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(jsWait)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(20 * time.Millisecond) // polling a condition, bounded by deadline
	}
	t.Fatalf("timed out after %v waiting for %s", jsWait, what)
}

// jsTab is one client process: its output lines and its stdin.
type jsTab struct {
	t     *testing.T
	name  string
	stdin io.WriteCloser
	lines chan map[string]any
	seen  []map[string]any
}

func startJSTab(t *testing.T, nodeExe, module, user, group string, urls ...string) *jsTab {
	t.Helper()
	args := []string{"--experimental-websocket", "--no-warnings", filepath.Join("jsclient", "tab_test.mjs"), module, user, group}
	args = append(args, joinComma(urls))
	cmd := exec.Command(nodeExe, args...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tab := &jsTab{t: t, name: user, stdin: stdin, lines: make(chan map[string]any, 1000)}
	go func() {
		defer close(tab.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				tab.lines <- m
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return tab
}

func joinComma(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += ","
		}
		out += x
	}
	return out
}

func (tab *jsTab) send(line string) {
	tab.t.Helper()
	if _, err := io.WriteString(tab.stdin, line+"\n"); err != nil {
		tab.t.Fatal(err)
	}
}

// waitLine reads the tab's output until a line has every field of want.
// waitLines waits for a line matching each of wants, in any order.
func (tab *jsTab) waitLines(what string, wants ...map[string]any) {
	tab.t.Helper()
	timeout := time.After(jsWait)
	for len(wants) > 0 {
		select {
		case m, ok := <-tab.lines:
			if !ok {
				tab.t.Fatalf("%s: the client exited before %s; it said %v", tab.name, what, tab.seen)
			}
			tab.seen = append(tab.seen, m)
			wants = slices.DeleteFunc(wants, func(want map[string]any) bool {
				for k, v := range want {
					if m[k] != v {
						return false
					}
				}
				return true
			})
		case <-timeout:
			tab.t.Fatalf("%s: no %s within %v; it said %v", tab.name, what, jsWait, tab.seen)
		}
	}
}

func (tab *jsTab) waitLine(what string, want map[string]any) {
	tab.t.Helper()
	timeout := time.After(jsWait)
	for {
		select {
		case m, ok := <-tab.lines:
			if !ok {
				tab.t.Fatalf("%s: the client exited before %s; it said %v", tab.name, what, tab.seen)
			}
			tab.seen = append(tab.seen, m)
			if e, ok := m["error"]; ok {
				tab.t.Fatalf("%s: %v (waiting for %s)", tab.name, e, what)
			}
			match := true
			for k, v := range want {
				if m[k] != v {
					match = false
				}
			}
			if match {
				return
			}
		case <-timeout:
			tab.t.Fatalf("%s: no %s within %v; it said %v", tab.name, what, jsWait, tab.seen)
		}
	}
}

// online reports whether the gateway sees user online with a session on gateway.
func online(t *testing.T, gw *node.Node, user, gateway string) bool {
	t.Helper()
	resp, err := http.Get("http://" + gw.HTTPAddr().String() + "/v1/presence/" + user)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var p struct {
		Online   bool `json:"online"`
		Sessions []struct {
			Gateway string `json:"gateway"`
		} `json:"sessions"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
		t.Fatal(err)
	}
	return p.Online && len(p.Sessions) == 1 && p.Sessions[0].Gateway == gateway
}

// TestJSClientFailover: two clients of the JavaScript module on two
// gateways of a cluster. A's status reaches B; A's close shows A offline
// in B; when B's gateway goes, B reconnects to the other one and stays
// online there.
func TestJSClientFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIP: -short: the JavaScript client test starts Node.js and a gossip cluster")
	}
	nodeExe, module := jsModule(t)
	gs := startJSCluster(t, 2)
	g0, g1 := gs[0], gs[1]

	b := startJSTab(t, nodeExe, module, "bob", "team", g1.WS(), g0.WS())
	b.waitLine("connected to g1", map[string]any{"state": "connected", "gateway": "g1"})
	b.waitLine("bob in the roster", map[string]any{"user": "bob", "status": "available"})

	a := startJSTab(t, nodeExe, module, "alice", "team", g0.WS())
	a.waitLine("connected to g0", map[string]any{"state": "connected", "gateway": "g0"})
	b.waitLine("alice online", map[string]any{"user": "alice", "status": "available"})
	b.send("sub alice")
	b.waitLine("alice online, not last seen", map[string]any{"sub": "alice", "online": true, "seen": false})

	a.send("status away")
	a.waitLine("the status ok", map[string]any{"ok": "status"})
	b.waitLine("alice away", map[string]any{"user": "alice", "status": "away"})

	a.send("close")
	a.waitLine("closed", map[string]any{"closed": true})
	b.waitLines("alice offline in the group, and last seen", map[string]any{"user": "alice", "status": "offline"},
		map[string]any{"sub": "alice", "online": false, "seen": true})

	g1.Kill()
	b.waitLine("reconnected to g0", map[string]any{"state": "connected", "gateway": "g0"})
	jsWaitFor(t, "bob online on g0, seen from g0", func() bool { return online(t, g0.GW, "bob", "g0") })
}

// TestJSClientGroupPages: the JavaScript client reads a group's members
// page by page (groupMembers with a limit of one a page follows next to
// the end) and its count alone (groupCount).
func TestJSClientGroupPages(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIP: -short: the JavaScript client test starts Node.js and a gateway")
	}
	nodeExe, module := jsModule(t)
	g0 := startJSCluster(t, 1)[0]
	var tabs []*jsTab
	for _, u := range []string{"carol", "alice", "bob"} {
		tab := startJSTab(t, nodeExe, module, u, "team", g0.WS())
		tab.waitLine("connected", map[string]any{"state": "connected"})
		tabs = append(tabs, tab)
	}
	a := tabs[0]
	// bob connected last: once carol sees him, all three are online.
	a.waitLine("bob in the roster", map[string]any{"user": "bob", "status": "available"})
	a.send("members 1")
	a.waitLine("every page of the members", map[string]any{"members": "alice,bob,carol", "online": 3.0})
	a.send("count")
	a.waitLine("the count", map[string]any{"count": 3.0})
}

// TestJSClientKicked: the app's backend disconnects alice through another
// gateway's HTTP API; her JavaScript client stops in state kicked instead
// of reconnecting, and bob sees her offline.
func TestJSClientKicked(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIP: -short: the JavaScript client test starts Node.js and a gossip cluster")
	}
	nodeExe, module := jsModule(t)
	gs := startJSCluster(t, 2)
	g0, g1 := gs[0], gs[1]
	b := startJSTab(t, nodeExe, module, "bob", "team", g0.WS())
	b.waitLine("connected to g0", map[string]any{"state": "connected", "gateway": "g0"})
	a := startJSTab(t, nodeExe, module, "alice", "team", g1.WS())
	a.waitLine("connected to g1", map[string]any{"state": "connected", "gateway": "g1"})
	b.waitLine("alice online", map[string]any{"user": "alice", "status": "available"})

	resp, err := http.Post("http://"+g0.GW.HTTPAddr().String()+"/v1/users/alice/disconnect", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("disconnect: %s", resp.Status)
	}
	a.waitLine("kicked", map[string]any{"state": "kicked"})
	b.waitLine("alice offline", map[string]any{"user": "alice", "status": "offline"})
}
