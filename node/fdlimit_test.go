//go:build unix

package node

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rollcall/rollcall/protocol"
)

func TestConnectionsForFileLimit(t *testing.T) {
	for _, tc := range []struct{ limit, reserve, conns int }{
		{20_000, 1_000, 19_000}, // this project's machines
		{65_536, 3_276, 62_260},
		{1_048_576, 52_428, 996_148},
		{1_024, 64, 960}, // the common default soft limit: the minimum reserve
		{1_280, 64, 1_216},
		{1_300, 65, 1_235},
		{100, 64, 36},
		{64, 64, 1}, // never zero: one connection, always refused past it
		{1, 64, 1},
	} {
		if got := FileReserve(tc.limit); got != tc.reserve {
			t.Errorf("FileReserve(%d) = %d, want %d", tc.limit, got, tc.reserve)
		}
		if got := ConnectionsForFileLimit(tc.limit); got != tc.conns {
			t.Errorf("ConnectionsForFileLimit(%d) = %d, want %d", tc.limit, got, tc.conns)
		}
	}
	for _, limit := range []int{0, -1} {
		if got := ConnectionsForFileLimit(limit); got != -1 {
			t.Errorf("ConnectionsForFileLimit(%d) = %d, want -1 (no cap)", limit, got)
		}
	}
}

// TestMaxConnectionsUnderTheFileLimit: the cap a node enforces is
// MaxConnections or what its open-file limit holds, whichever is lower,
// also after SetLimits, and a MaxConnections of "no cap" still stops at
// the file limit.
func TestMaxConnectionsUnderTheFileLimit(t *testing.T) {
	for _, tc := range []struct {
		name               string
		fileLimit, maxConn int
		want               int
	}{
		{"default cap, low file limit", 1_000, 0, 936},
		{"cap below the file limit", 1_000, 500, 500},
		{"no cap, low file limit", 1_000, -1, 936},
		{"no file limit", -1, 0, DefaultMaxConnections},
		{"neither", -1, -1, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newTestNode(t, func(c *Config) { c.FileLimit, c.MaxConnections = tc.fileLimit, tc.maxConn })
			if got := n.MaxConnections(); got != tc.want {
				t.Fatalf("MaxConnections() = %d, want %d", got, tc.want)
			}
			if got := n.Metrics().MaxConnections; got != tc.want {
				t.Fatalf("Metrics().MaxConnections = %d, want %d", got, tc.want)
			}
		})
	}
	n := newTestNode(t, func(c *Config) { c.FileLimit = 1_000; c.MaxConnections = 10 })
	if _, err := n.SetLimits(Limits{MaxConnections: 5_000}); err != nil {
		t.Fatal(err)
	}
	if got := n.MaxConnections(); got != 936 {
		t.Fatalf("after SetLimits(5,000) under a file limit of 1,000: %d, want 936", got)
	}
	if limit, conns := n.FileLimit(); limit != 1_000 || conns != 936 {
		t.Fatalf("FileLimit() = %d, %d", limit, conns)
	}

	// Without Config.FileLimit the node reads the process's.
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Cur < 1<<31 {
		n := newTestNode(t, nil)
		if limit, _ := n.FileLimit(); limit != int(lim.Cur) {
			t.Fatalf("FileLimit() = %d, the process's soft limit is %d", limit, lim.Cur)
		}
	}
}

// TestFileLimitAdmission: past the connection cap the file limit sets, a
// client is told overloaded, like past MaxConnections.
func TestFileLimitAdmission(t *testing.T) {
	n := newTestNode(t, func(c *Config) { c.FileLimit = 66 }) // 66 - 64: two connections
	for i := range 2 {
		c := dial(t, n)
		c.hello("u"+strconv.Itoa(i), "d")
	}
	c := dial(t, n)
	if f := c.recv(); f.str("code") != string(protocol.CodeOverloaded) {
		t.Fatalf("third connection got %v, want overloaded", f)
	}
}

// TestOutOfFilesAnswersOverloaded: when accept fails because the process
// has no file descriptor left, a connecting client is still told
// overloaded and closed, not left waiting in the listen backlog, and so is
// the next one. The gateway runs in a child process (this test binary
// again, TestOutOfFilesHelper) that fills its own descriptor table.
func TestOutOfFilesAnswersOverloaded(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a child process")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestOutOfFilesHelper$", "-test.v")
	cmd.Env = append(os.Environ(), "ROLLCALL_OUT_OF_FILES_HELPER=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var rest strings.Builder
	restDone := make(chan struct{})
	t.Cleanup(func() {
		stdin.Close()
		<-restDone
		if err := cmd.Wait(); err != nil {
			t.Errorf("helper: %v\n%s", err, rest.String())
		}
		if t.Failed() {
			t.Logf("helper stderr:\n%s", stderr.String())
		}
	})
	sc := bufio.NewScanner(stdout)
	var addr string
	for sc.Scan() {
		if a, ok := strings.CutPrefix(sc.Text(), "full "); ok {
			addr = a
			break
		}
	}
	go func() {
		defer close(restDone)
		for sc.Scan() {
			rest.WriteString(sc.Text() + "\n")
		}
	}()
	if addr == "" {
		t.Fatal("the helper never filled its descriptor table")
	}

	for i := range 3 {
		nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		r := bufio.NewReader(nc)
		line, err := r.ReadBytes('\n')
		if err != nil {
			nc.Close()
			t.Fatalf("client %d: %v (want an overloaded error line, not a hang)", i, err)
		}
		var f protocol.ErrorFrame
		if err := json.Unmarshal(line, &f); err != nil || f.Op != protocol.OpError || f.Code != protocol.CodeOverloaded {
			t.Fatalf("client %d got %q, want an overloaded error", i, line)
		}
		if _, err := r.ReadByte(); err != io.EOF {
			t.Fatalf("client %d: after overloaded, %v; want the connection closed", i, err)
		}
		nc.Close()
	}
}

// TestOutOfFilesHelper is TestOutOfFilesAnswersOverloaded's child process:
// it starts a gateway, opens files until the process has no descriptor
// left, prints "full <client address>" and holds them until stdin closes;
// then it checks that the gateway counted the three refusals.
func TestOutOfFilesHelper(t *testing.T) {
	if os.Getenv("ROLLCALL_OUT_OF_FILES_HELPER") == "" {
		t.Skip("helper process for TestOutOfFilesAnswersOverloaded")
	}
	// A small table fills fast; only this process has it.
	lim := syscall.Rlimit{Cur: 256, Max: 256}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	n := newTestNode(t, func(c *Config) { c.FileLimit = -1 }) // so that the node itself never refuses first
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	for {
		f, err := os.Open(os.DevNull)
		if err != nil {
			if !errors.Is(err, syscall.EMFILE) {
				t.Fatal(err)
			}
			break
		}
		files = append(files, f)
	}
	fmt.Printf("full %s\n", n.ClientAddr())
	io.Copy(io.Discard, os.Stdin) //nolint:errcheck // until the parent is done
	if got := n.Metrics().OutOfFiles; got != 3 {
		t.Errorf("out-of-files refusals counted: %d, want 3", got)
	}
}
