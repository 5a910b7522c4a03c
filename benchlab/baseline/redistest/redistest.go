// Package redistest starts a throwaway redis-server for tests: loopback,
// a free port, no persistence, expiry notifications on.
package redistest

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Start runs a redis-server for the test and returns its address; it is
// stopped at the test's end. The test is skipped, saying why, when no
// redis-server is installed (Debian: apt-get install redis-server).
func Start(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server not found in PATH (Debian: apt-get install -y redis-server); the Redis baseline tests need a real one")
	}
	for attempt := 0; ; attempt++ {
		addr, err := tryStart(t, bin)
		if err == nil {
			return addr
		}
		if attempt == 2 {
			t.Fatalf("starting redis-server: %v", err)
		}
	}
}

func tryStart(t testing.TB, bin string) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--notify-keyspace-events", "Ex",
		"--dir", t.TempDir(), "--logfile", "")
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("%s: %w", bin, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := rdb.Ping(ctx).Err()
		cancel()
		if err == nil {
			break
		}
		select {
		case <-exited:
			return "", fmt.Errorf("redis-server on port %d exited: %w", port, err)
		default:
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			return "", fmt.Errorf("redis-server on port %d does not answer: %w", port, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	return addr, nil
}
