package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rollcall/rollcall/internal/testkit"
)

// TestNetnsPartitionAndHeal runs three agents on three separate hosts —
// network namespaces joined by a bridge, each with its own address — then
// cuts one host's link (a real partition: nothing crosses, UDP or TCP),
// checks that each side shows the other's sessions expired, heals the link
// and checks that the cluster re-merges and everyone is online again. It
// needs root and iproute2; it is skipped elsewhere and under -short.
func TestNetnsPartitionAndHeal(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and sets up network namespaces")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs iproute2")
	}
	tag := fmt.Sprintf("%d", os.Getpid()%100000)
	sw := "rcsw" + tag
	hosts := []string{"rca" + tag, "rcb" + tag, "rcc" + tag}
	addrs := []string{"10.213.0.1", "10.213.0.2", "10.213.0.3"}
	ipcmd := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	ipcmd("netns", "add", sw)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", sw).Run() })
	ipcmd("-n", sw, "link", "add", "br0", "type", "bridge")
	ipcmd("-n", sw, "link", "set", "br0", "up")
	for i, h := range hosts {
		ipcmd("netns", "add", h)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", h).Run() })
		port := fmt.Sprintf("p%d", i)
		ipcmd("-n", h, "link", "add", "eth0", "type", "veth", "peer", "name", port, "netns", sw)
		ipcmd("-n", h, "addr", "add", addrs[i]+"/24", "dev", "eth0")
		ipcmd("-n", h, "link", "set", "eth0", "up")
		ipcmd("-n", h, "link", "set", "lo", "up")
		ipcmd("-n", sw, "link", "set", port, "master", "br0")
		ipcmd("-n", sw, "link", "set", port, "up")
	}

	bin := testkit.BuildRollcall(t)
	const timeout = 2 * time.Second
	for i, h := range hosts {
		args := []string{"netns", "exec", h, bin, "agent", "--name", fmt.Sprintf("host%d", i), "--dev",
			"--client-addr", addrs[i] + ":7400", "--http-addr", addrs[i] + ":7401", "--gossip-addr", addrs[i] + ":7946",
			"--gossip-profile", "lan", "--timeout", timeout.String(), "--heartbeat", "500ms", "--log-level", "error"}
		if i > 0 {
			args = append(args, "--join", addrs[0]+":7946")
		}
		cmd := exec.Command("ip", args...)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	}

	// Clients live inside the hosts' namespaces, so cutting a host's link
	// to the others does not cut its own clients.
	dial := func(i int, user string) *testkit.LineClient {
		t.Helper()
		var c *testkit.LineClient
		deadline := time.Now().Add(10 * time.Second)
		for {
			conn, err := dialInNetns(hosts[i], addrs[i]+":7400")
			if err == nil {
				c = testkit.NewLineClient(t, conn, user, "d", nil)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("dial host%d: %v", i, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		c.Heartbeat(300 * time.Millisecond)
		return c
	}
	alice := dial(0, "alice")
	carol := dial(2, "carol")
	bob := dial(1, "bob")
	bob.Send(map[string]any{"op": "sub", "users": []string{"alice", "carol"}, "id": 1})
	bob.Expect("ok", replyWithin)
	online := map[string]bool{}
	track := func(d time.Duration) map[string]any {
		ev := bob.Expect("event", d)
		online[ev["user"].(string)] = ev["online"] == true
		return ev
	}
	deadline := time.Now().Add(15 * time.Second)
	for !(online["alice"] && online["carol"]) {
		track(time.Until(deadline))
	}

	// Cut host2 (carol's) off the switch.
	cut := time.Now()
	ipcmd("-n", sw, "link", "set", "p2", "down")
	for online["carol"] {
		track(timeout + 10*time.Second)
	}
	t.Logf("partition to carol offline on host1: %v (timeout %v)", time.Since(cut), timeout)
	if !online["alice"] {
		t.Fatal("alice went offline on host1 though only host2 was cut off")
	}
	// And from carol's side, alice (on host0) is shown offline.
	carol.Send(map[string]any{"op": "get", "users": []string{"alice"}, "id": 2})
	deadline = time.Now().Add(timeout + 10*time.Second)
	for {
		p := carol.Expect("presence", replyWithin)
		if p["users"].([]any)[0].(map[string]any)["online"] == false {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("host2 still shows alice online across the partition")
		}
		time.Sleep(200 * time.Millisecond)
		carol.Send(map[string]any{"op": "get", "users": []string{"alice"}, "id": 2})
	}

	// Hold the partition until memberlist on host1 declares host2 dead, so
	// that healing needs the reconnect path (each side holds the other
	// dead and memberlist alone would never re-merge them).
	deadline = time.Now().Add(30 * time.Second)
	for {
		out, _ := exec.Command("ip", "netns", "exec", hosts[1], bin, "members", "--http-addr", addrs[1]+":7401").CombinedOutput()
		if strings.Contains(string(out), "host2") && strings.Contains(lineOf(string(out), "host2"), "dead") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("host1 never declared host2 dead:\n%s", out)
		}
		time.Sleep(250 * time.Millisecond)
	}

	// Heal: the sides re-merge (reconnect to dead members) and carol, who
	// kept heartbeating on her own host, is online again everywhere.
	healed := time.Now()
	ipcmd("-n", sw, "link", "set", "p2", "up")
	for !online["carol"] {
		track(60 * time.Second)
	}
	t.Logf("heal to carol online again on host1: %v", time.Since(healed))
	_ = alice
}

func lineOf(text, word string) string {
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, word) {
			return l
		}
	}
	return ""
}

// dialInNetns opens a TCP connection from inside a network namespace: the
// socket stays in that namespace after the thread switches back.
func dialInNetns(ns, addr string) (net.Conn, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	self, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		return nil, err
	}
	defer self.Close()
	target, err := os.Open("/run/netns/" + ns)
	if err != nil {
		return nil, err
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		return nil, fmt.Errorf("setns %s: %w", ns, err)
	}
	conn, dialErr := net.DialTimeout("tcp", addr, 2*time.Second)
	if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
		panic(fmt.Sprintf("cannot return to the test's network namespace: %v", err))
	}
	return conn, dialErr
}
