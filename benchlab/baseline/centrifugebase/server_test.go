package centrifugebase_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/rollcall/rollcall/benchlab/baseline/centrifugebase"
	"github.com/rollcall/rollcall/benchlab/baseline/redistest"
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

// Two servers sharing Redis: the subscribers on one see the status
// changes published on the other, and the clients count the servers'
// pings. (Under a loaded machine a client may miss its pong deadline and
// be disconnected, failing the changes in flight: errors are allowed.)
func TestLoadStatusChangesAcrossServers(t *testing.T) {
	addr := redistest.Start(t)
	a := start(t, centrifugebase.ServerConfig{Redis: addr, PingInterval: time.Second, PresenceTTL: 2 * time.Second})
	b := start(t, centrifugebase.ServerConfig{Redis: addr, PingInterval: time.Second, PresenceTTL: 2 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := centrifugebase.Load(ctx, centrifugebase.LoadConfig{URLs: []string{a.URL(), b.URL()}, Sessions: 40, Rooms: 4,
		Subscribers: 4, Watch: 10, StatusRate: 50, ConnectRate: 400,
		Hold: 2 * time.Second, Settle: -1, PIDs: []int{os.Getpid(), os.Getpid()}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Subscribed != 40 || r.Failed != 0 || r.Subscribers != 4 || r.WatchedRooms != 1 || len(r.PIDs) != 2 {
		t.Fatalf("sessions: %+v", r)
	}
	if r.Pings == 0 || r.StatusOK == 0 || r.Propagation.Count == 0 {
		t.Fatalf("pings, changes, propagation: %+v", r)
	}
	if r.ServerCPU <= 0 || r.RSSAfter == 0 {
		t.Fatalf("server samples: %+v", r)
	}
}
