package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rollcall/rollcall/internal/testkit"
)

// loggedAgent is a `rollcall agent` process whose log a test reads.
type loggedAgent struct {
	cmd    *exec.Cmd
	log    *syncBuffer
	exited chan error
}

func startLoggedAgent(t *testing.T, bin string, args ...string) *loggedAgent {
	t.Helper()
	a := &loggedAgent{log: &syncBuffer{}, exited: make(chan error, 1)}
	a.cmd = exec.Command(bin, append([]string{"agent"}, args...)...)
	a.cmd.Stderr = a.log
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { a.exited <- a.cmd.Wait() }()
	t.Cleanup(func() {
		_ = a.cmd.Process.Kill()
		if t.Failed() {
			t.Logf("agent log:\n%s", a.log.String())
		}
	})
	return a
}

// waitLog waits until the agent has logged want.
func (a *loggedAgent) waitLog(t *testing.T, want string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(a.log.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("agent never logged %q", want)
		}
		select {
		case err := <-a.exited:
			t.Fatalf("agent exited (%v) before logging %q", err, want)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (a *loggedAgent) signal(t *testing.T, sig os.Signal) {
	t.Helper()
	if err := a.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// A second SIGTERM during the drain exits at once with status 1, logged.
func TestSecondSignalExitsAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs it")
	}
	client, httpAddr := freeAddr(t), freeAddr(t)
	a := startLoggedAgent(t, testkit.BuildRollcall(t), "--name", "gw", "--dev", "--client-addr", client, "--http-addr", httpAddr,
		"--gossip-addr", "", "--drain-timeout", "60s", "--log-format", "json")
	waitDial(t, client)
	testkit.DialLine(t, client, "bob", "laptop", nil)
	// An HTTP connection that has sent nothing holds the agent's HTTP
	// shutdown (for up to a second), so the drain is still running when
	// the second signal comes.
	hold, err := net.Dial("tcp", httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Close()

	a.signal(t, syscall.SIGTERM)
	a.waitLog(t, `"shutting down"`)
	a.signal(t, syscall.SIGTERM)
	select {
	case err := <-a.exited:
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 {
			t.Fatalf("after a second SIGTERM the agent exited with %v, want status 1", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the agent did not exit at the second SIGTERM")
	}
	log := a.log.String()
	if !strings.Contains(log, "second signal during the drain: exiting at once") || !strings.Contains(log, `"signal":"terminated"`) {
		t.Fatalf("second signal not logged:\n%s", log)
	}
	if strings.Contains(log, `"stopped"`) {
		t.Fatal("the drain finished before the second signal came: the test did not test anything")
	}
}

// SIGHUP reloads the config file (log level, keyring) without ending the
// agent or any session.
func TestSIGHUPReloads(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs it")
	}
	dir := t.TempDir()
	keyring, config := filepath.Join(dir, "keyring"), filepath.Join(dir, "rollcall.yaml")
	a1, b1 := testKey(1), testKey(2)
	writeKeyring(t, keyring, a1)
	writeFile := func(level string) {
		text := fmt.Sprintf("dev: true\nlog-level: %s\nlog-format: json\nkeyring-file: %s\ngossip-profile: local\n", level, keyring)
		if err := os.WriteFile(config, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeFile("info")
	client := freeAddr(t)
	a := startLoggedAgent(t, testkit.BuildRollcall(t), "--config", config, "--name", "gw", "--client-addr", client,
		"--http-addr", freeAddr(t), "--gossip-addr", freeAddr(t))
	waitDial(t, client)
	bob := testkit.DialLine(t, client, "bob", "laptop", nil)
	if bob.Welcome["protocol"] != float64(1) {
		t.Fatalf("welcome without the protocol version: %v", bob.Welcome)
	}
	bob.Send(map[string]any{"op": "sub", "users": []string{"alice"}, "id": 1})
	bob.Expect("ok", replyWithin)
	if ev := bob.Expect("event", replyWithin); ev["online"] != false {
		t.Fatalf("alice online before she connected: %v", ev)
	}
	if strings.Contains(a.log.String(), `"session opened"`) {
		t.Fatal("a debug line at log level info")
	}

	writeFile("debug")
	writeKeyring(t, keyring, b1, a1)
	a.signal(t, syscall.SIGHUP)
	a.waitLog(t, `"reload done"`)
	log := a.log.String()
	for _, want := range []string{`"part":"log-level","changed":["log-level info -> debug"]`, `"primary gossip key changed"`, `"1 gossip key(s) installed"`, `"errors":0`} {
		if !strings.Contains(log, want) {
			t.Errorf("reload log lacks %s", want)
		}
	}
	select {
	case err := <-a.exited:
		t.Fatalf("SIGHUP ended the agent: %v", err)
	default:
	}

	// Debug lines now appear, and bob's session carried on.
	testkit.DialLine(t, client, "alice", "phone", nil)
	a.waitLog(t, `"session opened"`)
	if ev := bob.Expect("event", replyWithin); ev["online"] != true || ev["user"] != "alice" {
		t.Fatalf("bob after the reload: %v", ev)
	}
	bob.Send(map[string]any{"op": "get", "users": []string{"alice"}, "id": 2})
	if p := bob.Expect("presence", replyWithin); p["id"] != float64(2) {
		t.Fatalf("bob's get after the reload: %v", p)
	}

	a.signal(t, syscall.SIGTERM)
	select {
	case err := <-a.exited:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no exit after SIGTERM")
	}
}

// `rollcall version` and `--version` name the git revision the binary was
// built from, the Go version and the protocol version: built by make build
// (which passes them from git) and, in a checkout the go command can stamp
// (not a git worktree), by a plain go build.
func TestVersionFromGit(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	out, err := exec.Command("git", "rev-parse", "HEAD", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("not a git checkout (git rev-parse: %v): there is no revision to show", err)
	}
	lines := strings.Fields(string(out))
	rev, top := lines[0], lines[1]
	check := func(how, bin string) {
		t.Helper()
		for _, args := range [][]string{{"version"}, {"--version"}} {
			out, err := exec.Command(bin, args...).CombinedOutput()
			if err != nil {
				t.Fatalf("%s: rollcall %v: %v\n%s", how, args, err, out)
			}
			for _, want := range []string{"revision: " + rev, "protocol: 1", "go: go1.", "commit time: 20"} {
				if !strings.Contains(string(out), want) {
					t.Errorf("%s: rollcall %v lacks %q:\n%s", how, args, want, out)
				}
			}
		}
	}
	if _, err := exec.LookPath("make"); err == nil {
		bin := filepath.Join(t.TempDir(), "rollcall")
		if out, err := exec.Command("make", "-C", top, "build", "BIN="+bin, "VERSION=v9.8.7-test").CombinedOutput(); err != nil {
			t.Fatalf("make build: %v\n%s", err, out)
		}
		check("make build", bin)
		if out, _ := exec.Command(bin, "version").Output(); !strings.HasPrefix(string(out), "rollcall v9.8.7-test\n") {
			t.Errorf("make build VERSION=v9.8.7-test: %q", out)
		}
	} else {
		t.Log("no make: make build not checked")
	}
	if fi, err := os.Stat(filepath.Join(top, ".git")); err == nil && fi.IsDir() {
		check("go build -buildvcs=true", testkit.BuildRollcall(t, "-buildvcs=true"))
	} else {
		t.Log("a git worktree: the go command does not stamp its revision; only make build checked")
	}
}
