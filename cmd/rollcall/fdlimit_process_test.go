//go:build unix

package main

import (
	"compress/gzip"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rollcall/rollcall/internal/testkit"
	"github.com/rollcall/rollcall/protocol"
)

// rlimitEnv tells TestRlimitExecHelper the RLIMIT_NOFILE ("soft:hard") to
// run its command under.
const rlimitEnv = "RC_TEST_RLIMIT_NOFILE"

// startAgentWithFileLimit starts `bin agent args...` with a soft and hard
// RLIMIT_NOFILE of its own, through TestRlimitExecHelper (this test binary
// again, which sets the limit and execs the agent).
func startAgentWithFileLimit(t *testing.T, soft, hard int, bin string, args ...string) *loggedAgent {
	t.Helper()
	a := &loggedAgent{log: &syncBuffer{}, exited: make(chan error, 1)}
	a.cmd = exec.Command(os.Args[0], append([]string{"-test.run=^TestRlimitExecHelper$", "--", bin, "agent"}, args...)...)
	a.cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d:%d", rlimitEnv, soft, hard))
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

// TestRlimitExecHelper is startAgentWithFileLimit's child: it sets its
// RLIMIT_NOFILE and execs its arguments, which inherit it.
func TestRlimitExecHelper(t *testing.T) {
	spec := os.Getenv(rlimitEnv)
	if spec == "" {
		t.Skip("helper process for startAgentWithFileLimit")
	}
	soft, hard, _ := strings.Cut(spec, ":")
	var lim syscall.Rlimit
	var err error
	if lim.Cur, err = strconv.ParseUint(soft, 10, 64); err != nil {
		t.Fatal(err)
	}
	if lim.Max, err = strconv.ParseUint(hard, 10, 64); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, rlimitEnv+"=") {
			env = append(env, kv)
		}
	}
	args := flag.Args()
	t.Fatal(syscall.Exec(args[0], args, env)) // returns only on failure
}

// TestAgentUnderALowFileLimit: an agent whose open-file limit cannot hold
// --max-connections raises its soft limit to the hard one, warns, naming
// the limit and the flag, caps its connections below the limit (shown in
// /metrics), and tells the client past the cap overloaded instead of
// leaving it waiting.
func TestAgentUnderALowFileLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs it")
	}
	const soft, hard = 100, 300
	const conns = hard - 64 // node.ConnectionsForFileLimit(300): the reserve is its minimum, 64
	client, httpAddr := freeAddr(t), freeAddr(t)
	a := startAgentWithFileLimit(t, soft, hard, testkit.BuildRollcall(t), "--name", "gw", "--dev", "--client-addr", client,
		"--http-addr", httpAddr, "--gossip-addr", "", "--log-format", "json", "--admin-token-file", writeAdminToken(t))
	waitDial(t, client)
	a.waitLog(t, `"open-file limit","soft":300,"hard":300`)
	a.waitLog(t, fmt.Sprintf("--max-connections 100000 is more than the open-file limit (300) allows: at most %d connections", conns))

	var m string
	for _, line := range strings.Split(httpGet(t, "http://"+httpAddr+"/metrics", ""), "\n") {
		if strings.HasPrefix(line, "rollcall_max_connections ") || strings.HasPrefix(line, "rollcall_open_file_limit ") {
			m += line + "\n"
		}
	}
	if want := fmt.Sprintf("rollcall_max_connections %d\nrollcall_open_file_limit 300\n", conns); m != want {
		t.Fatalf("/metrics shows\n%swant\n%s", m, want)
	}

	for i := range conns {
		testkit.DialLine(t, client, "u"+strconv.Itoa(i), "d", nil)
	}
	for i := range 2 {
		nc, err := net.Dial("tcp", client)
		if err != nil {
			t.Fatal(err)
		}
		nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		line, err := protocol.NewReader(nc, 4<<10, protocol.MaxLineBytes).ReadLine()
		nc.Close()
		var f protocol.ErrorFrame
		if err != nil || protocol.Unmarshal(line, &f) != nil || f.Op != protocol.OpError || f.Code != protocol.CodeOverloaded {
			t.Fatalf("connection %d: %q %v; want an overloaded error line", conns+1+i, line, err)
		}
	}
}

// TestAgentPprof: /debug/pprof on the HTTP port answers the admin token
// only, with Go's profiles.
func TestAgentPprof(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs it")
	}
	client, httpAddr := freeAddr(t), freeAddr(t)
	startLoggedAgent(t, testkit.BuildRollcall(t), "--name", "gw", "--dev", "--client-addr", client, "--http-addr", httpAddr,
		"--gossip-addr", "", "--admin-token-file", writeAdminToken(t))
	waitDial(t, client)
	base := "http://" + httpAddr + "/debug/pprof/"
	for _, path := range []string{"", "heap", "goroutine?debug=1", "cmdline"} {
		if code := httpStatus(t, base+path, ""); code != http.StatusUnauthorized {
			t.Errorf("GET /debug/pprof/%s without a token: %d, want 401", path, code)
		}
		if code := httpStatus(t, base+path, "not-"+testAdminToken); code != http.StatusUnauthorized {
			t.Errorf("GET /debug/pprof/%s with a wrong token: %d, want 401", path, code)
		}
	}
	if idx := httpGet(t, base, testAdminToken); !strings.Contains(idx, "goroutine") || !strings.Contains(idx, "heap") {
		t.Fatalf("the pprof index with the token:\n%s", idx)
	}
	if g := httpGet(t, base+"goroutine?debug=1", testAdminToken); !strings.Contains(g, "goroutine profile: total") {
		t.Fatalf("goroutine profile:\n%.500s", g)
	}
	heap := httpGet(t, base+"heap", testAdminToken)
	if _, err := gzip.NewReader(strings.NewReader(heap)); err != nil {
		t.Fatalf("the heap profile is not a gzipped profile: %v", err)
	}
}

// httpGet GETs url with a bearer token ("": none) and returns the body of
// a 200.
func httpGet(t *testing.T, url, token string) string {
	t.Helper()
	resp := httpDo(t, url, token)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v\n%s", url, resp.StatusCode, err, body)
	}
	return string(body)
}

func httpStatus(t *testing.T, url, token string) int {
	t.Helper()
	resp := httpDo(t, url, token)
	resp.Body.Close()
	return resp.StatusCode
}

func httpDo(t *testing.T, url, token string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}
