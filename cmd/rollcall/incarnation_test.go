package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rollcall/rollcall/gossip"
	"github.com/rollcall/rollcall/internal/testkit"
)

// inProcessAgent runs runAgent with args in a goroutine until the test
// ends; its error arrives on the channel.
func inProcessAgent(t *testing.T, args ...string) <-chan error {
	t.Helper()
	ctx, stop := context.WithCancel(t.Context())
	done, finished := make(chan error, 1), make(chan struct{})
	go func() {
		defer close(finished)
		done <- runAgent(ctx, append(args, "--log-level", "error"), io.Discard, io.Discard)
	}()
	t.Cleanup(func() {
		stop()
		<-finished
	})
	return done
}

// members asks an agent's HTTP port for its member list.
func members(t *testing.T, httpAddr string) []gossip.Member {
	t.Helper()
	var ms []gossip.Member
	agent := &agentClient{addr: httpAddr, scheme: "http", http: &http.Client{}}
	if err := agent.call(t.Context(), "GET", "/v1/members", nil, &ms); err != nil {
		t.Fatalf("GET /v1/members: %v", err)
	}
	return ms
}

// A second agent started under the name of a live one fails at once with
// an error naming the name and the live one's gossip address; the live one
// keeps its session shown and its place in the cluster.
func TestAgentRefusesADuplicateName(t *testing.T) {
	first := struct{ client, http, gossip string }{freeAddr(t), freeAddr(t), freeAddr(t)}
	second := struct{ client, http, gossip string }{freeAddr(t), freeAddr(t), freeAddr(t)}
	firstDone := inProcessAgent(t, "--name", "gw1", "--dev", "--client-addr", first.client, "--http-addr", first.http,
		"--gossip-addr", first.gossip, "--gossip-profile", "local")
	waitDial(t, first.client)
	alice := testkit.DialLine(t, first.client, "alice", "phone", nil)
	alice.Heartbeat(300 * time.Millisecond)

	secondDone := inProcessAgent(t, "--name", "gw1", "--dev", "--client-addr", second.client, "--http-addr", second.http,
		"--gossip-addr", second.gossip, "--gossip-profile", "local", "--join", first.gossip)
	select {
	case err := <-secondDone:
		if err == nil || !strings.Contains(err.Error(), `"gw1"`) || !strings.Contains(err.Error(), first.gossip) {
			t.Fatalf("the second gw1 ended with %v; want an error naming gw1 and %s", err, first.gossip)
		}
		t.Logf("refused: %v", err)
	case <-time.After(15 * time.Second):
		t.Fatal("a second agent named gw1 joined a cluster whose gw1 is alive and kept running")
	}

	select {
	case err := <-firstDone:
		t.Fatalf("the first gw1 stopped: %v", err)
	default:
	}
	ms := members(t, first.http)
	if len(ms) != 1 || ms[0].Name != "gw1" || ms[0].Addr != first.gossip || ms[0].Sessions != 1 {
		t.Fatalf("the first gw1 lists %+v; want itself alone, at %s, with alice's session", ms, first.gossip)
	}
}

// With --data-dir the agent starts one past the incarnation kept there,
// even when that is ahead of its clock (an earlier run's clock was
// later), and keeps the one it runs as there before it announces.
func TestAgentDataDirKeepsTheIncarnation(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, gossip.IncarnationFileName)
	earlier := uint64(time.Now().Add(time.Hour).UnixNano())
	if err := gossip.WriteIncarnationFile(path, earlier); err != nil {
		t.Fatal(err)
	}
	client, httpAddr := freeAddr(t), freeAddr(t)
	inProcessAgent(t, "--name", "gw1", "--dev", "--client-addr", client, "--http-addr", httpAddr,
		"--gossip-addr", freeAddr(t), "--gossip-profile", "local", "--data-dir", dir)
	waitDial(t, client)
	ms := members(t, httpAddr)
	if len(ms) != 1 || ms[0].Incarnation != earlier+1 {
		t.Fatalf("the agent runs as %+v; want incarnation %d, one past the kept %d", ms, earlier+1, earlier)
	}
	b, err := os.ReadFile(path)
	if err != nil || strings.TrimSpace(string(b)) != strconv.FormatUint(earlier+1, 10) {
		t.Fatalf("the state file holds %q (%v); want %d", b, err, earlier+1)
	}
}

// A corrupt state file, or a --data-dir that cannot be made or written,
// stops the agent before it listens, with an error naming the problem.
func TestAgentDataDirErrors(t *testing.T) {
	tmp := t.TempDir()
	corrupt := filepath.Join(tmp, "corrupt")
	if err := os.Mkdir(corrupt, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(corrupt, gossip.IncarnationFileName), []byte("not a number\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	notADir := filepath.Join(tmp, "file")
	if err := os.WriteFile(notADir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ dir, want string }{
		{corrupt, "corrupt"},
		{filepath.Join(notADir, "sub"), "--data-dir"},
	} {
		client := freeAddr(t)
		err := runAgent(t.Context(), []string{"--name", "gw1", "--dev", "--client-addr", client, "--http-addr", "",
			"--gossip-addr", "", "--data-dir", c.dir, "--log-level", "error"}, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--data-dir %s: %v; want an error saying %q", c.dir, err, c.want)
		}
	}
}
