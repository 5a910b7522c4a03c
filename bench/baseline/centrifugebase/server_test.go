package centrifugebase_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/rollcall/rollcall/bench/baseline/centrifugebase"
	"github.com/rollcall/rollcall/bench/baseline/redistest"
)

func start(t *testing.T, cfg centrifugebase.ServerConfig) *centrifugebase.Server {
	t.Helper()
	cfg.Addr = "127.0.0.1:0"
	// Centrifuge's connection goroutines may log after Serve returns,
	// past the test's end: no test logger here
	cfg.Logger = zap.NewNop()
	s, err := centrifugebase.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s
}

// loadAndCheck connects 40 sessions over 4 rooms to a and checks, while
// they are connected, that the presence b's presence manager holds counts
// them.
func loadAndCheck(t *testing.T, a, b *centrifugebase.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	checked := false
	r, err := centrifugebase.Load(ctx, centrifugebase.LoadConfig{URL: a.URL(), Sessions: 40, Rooms: 4,
		Hold: 500 * time.Millisecond, Settle: 50 * time.Millisecond, PID: os.Getpid(),
		Ready: func() {
			checked = true
			for room := range 4 {
				n, err := b.Presence(ctx, strconv.Itoa(room))
				if err != nil || n != 10 {
					t.Errorf("room %d: presence %d (%v), want 10", room, n, err)
				}
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if !checked || r.Subscribed != 40 || r.Disconnects != 0 || r.RSSAfter == 0 {
		t.Fatalf("load result %+v", r)
	}
}

func TestMemoryPresence(t *testing.T) {
	s := start(t, centrifugebase.ServerConfig{PingInterval: time.Second})
	loadAndCheck(t, s, s)
}

func TestRedisPresenceAcrossServers(t *testing.T) {
	addr := redistest.Start(t)
	a := start(t, centrifugebase.ServerConfig{Redis: addr, PingInterval: time.Second})
	b := start(t, centrifugebase.ServerConfig{Redis: addr, PingInterval: time.Second})
	loadAndCheck(t, a, b)
}
