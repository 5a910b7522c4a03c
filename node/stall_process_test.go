package node

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/rollcall/rollcall/protocol"
)

// TestStallProcess is the stall of a whole process end to end: a gateway process
// (this test binary, re-run as TestStallGatewayHelper) with a 2s timeout is
// stopped with SIGSTOP for longer than that and continued. Its sweeper
// must not expire the clients that kept heartbeating into their sockets
// while the gateway was stopped; a client that was silent still expires.
// (Before stalls were detected, whether a client survived depended on
// whether its reader ran before the sweeper on resume: many clients make
// a loss likely.)
func TestStallProcess(t *testing.T) {
	const heartbeating = 50
	if testing.Short() {
		t.Skip("stops a gateway process for 2.5s")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestStallGatewayHelper$")
	cmd.Env = append(os.Environ(), "ROLLCALL_STALL_GATEWAY=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGCONT)
		stdin.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	sc := bufio.NewScanner(stdout)
	var addr string
	for sc.Scan() {
		if a, ok := strings.CutPrefix(sc.Text(), "listening "); ok {
			addr = a
			break
		}
	}
	if addr == "" {
		t.Fatal("the gateway process did not start")
	}
	go io.Copy(io.Discard, stdout)
	silent := dialAddr(t, addr)
	silent.hello("silent", "phone")
	good := make([]*client, heartbeating)
	for i := range good {
		good[i] = dialAddr(t, addr)
		good[i].hello(fmt.Sprintf("good%d", i), "phone")
	}
	stop := make(chan struct{})
	beating := make(chan struct{})
	go func() {
		defer close(beating)
		tk := time.NewTicker(500 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
			}
			for _, c := range good {
				c.nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
				if _, err := io.WriteString(c.nc, "{\"op\":\"hb\"}\n"); err != nil {
					return
				}
			}
		}
	}()
	good[0].call(map[string]any{"op": "hb"})

	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond) // longer than the 2s timeout
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// The silent client expires once the sweeper, running again, finds its
	// deadline (extended by the stall) passed: by then it has had every
	// chance to expire the heartbeating clients too.
	silent.expectError(protocol.CodeExpired)
	close(stop)
	<-beating
	expired := 0
	for _, c := range good {
		c.send(map[string]any{"op": "hb", "id": 1})
		if f := c.recv(); f.str("op") != protocol.OpHB {
			if f.str("code") != string(protocol.CodeExpired) {
				t.Fatalf("want an hb reply, got %v", f)
			}
			expired++
		}
	}
	if expired > 0 {
		t.Fatalf("%d of %d heartbeating clients expired by the gateway's stall", expired, heartbeating)
	}
}

// TestStallGatewayHelper is TestStallProcess's gateway process: it serves a
// node with a 2s timeout until stdin closes.
func TestStallGatewayHelper(t *testing.T) {
	if os.Getenv("ROLLCALL_STALL_GATEWAY") == "" {
		t.Skip("helper process for TestStallProcess")
	}
	n := newTestNode(t, func(c *Config) {
		c.Heartbeat = 500 * time.Millisecond
		c.Timeout = 2 * time.Second
		c.SweepInterval = 0 // the default, 200ms
		c.Logger = zap.NewNop()
	})
	fmt.Println("listening", n.ClientAddr())
	io.Copy(io.Discard, os.Stdin)
}
