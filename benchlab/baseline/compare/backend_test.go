package compare

import (
	"bufio"
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rollcall/rollcall/benchlab/baseline/redistest"
	"github.com/rollcall/rollcall/client"
	"github.com/rollcall/rollcall/internal/testkit"
	"github.com/rollcall/rollcall/node"
)

// startHold runs Hold on a goroutine and waits for its ready line; the
// returned stop ends it and returns Hold's error.
func startHold(t *testing.T, c HoldConfig) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	pr, pw := io.Pipe()
	c.Ready = pw
	done := make(chan error, 1)
	go func() { done <- Hold(ctx, c); pw.Close() }()
	line, err := bufio.NewReader(pr).ReadString('\n')
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	if err != nil {
		cancel()
		t.Fatalf("no ready line: %v (hold: %v)", err, <-done)
	}
	if want := "ready " + strconv.Itoa(c.Users) + "\n"; line != want {
		t.Fatalf("ready line %q, want %q", line, want)
	}
	return func() error { cancel(); return <-done }
}

// The Redis worker keeps a key with its epoch and the TTL per user,
// refreshed by an epoch-guarded write; once it stops, the reader reads every user offline (first, then
// all) and receives every key's expiry event.
func TestHoldRedisAndItsReader(t *testing.T) {
	addr := redistest.Start(t)
	const users = 300
	stop := startHold(t, HoldConfig{System: Redis, Addr: addr, Users: users, Refresh: 200 * time.Millisecond, TTL: time.Second, Epoch: 7})
	r := newRedisReader(addr, users)
	defer r.close()
	if n, err := r.present(t.Context()); err != nil || n != users {
		t.Fatalf("present: %d, %v", n, err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	k := RedisPresenceKey(BackendUser(users - 1))
	if v, err := rdb.Get(t.Context(), k).Result(); err != nil || v != "7:w1" {
		t.Fatalf("%s = %q, %v", k, v, err)
	}
	if ttl, err := rdb.TTL(t.Context(), k).Result(); err != nil || ttl <= 0 || ttl > time.Second {
		t.Fatalf("%s's TTL %v, %v", k, ttl, err)
	}
	if err := r.arm(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	since := time.Now()
	first, all, err := r.offline(t.Context(), since, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if first.IsZero() || all.Before(first) || first.Before(since) {
		t.Fatalf("offline: first %v, all %v, since %v", first, all, since)
	}
	if n, err := rdb.DBSize(t.Context()).Result(); err != nil || n != 0 {
		t.Fatalf("keys left after every user read offline: %d, %v", n, err)
	}
	if n, last := r.notifiedBy(t.Context(), time.Now().Add(30*time.Second)); n != users || last.IsZero() {
		t.Fatalf("expiry events: %d of %d", n, users)
	}
}

// A newer worker takes over the users it writes; the older worker's
// refreshes, still running, neither overwrite nor extend the newer
// worker's keys, and keep the users no newer worker holds.
func TestHoldRedisOlderEpochDoesNotOverwriteANewer(t *testing.T) {
	addr := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	ctx := t.Context()
	const users, taken = 10, 4
	stopOld := startHold(t, HoldConfig{System: Redis, Addr: addr, Users: users, Refresh: 20 * time.Millisecond, TTL: 120 * time.Second, Epoch: 100})
	defer func() {
		if err := stopOld(); err != nil {
			t.Error(err)
		}
	}()
	stopNew := startHold(t, HoldConfig{System: Redis, Addr: addr, Users: taken, Refresh: time.Hour, TTL: 60 * time.Second, Epoch: 200})
	defer func() {
		if err := stopNew(); err != nil {
			t.Error(err)
		}
	}()
	// Wait for a refresh of the older worker after the newer one's write:
	// a key only it holds, cut to a TTL below 60s here, gets its 120s back.
	last := RedisPresenceKey(BackendUser(users - 1))
	if err := rdb.PExpire(ctx, last, 50*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 30*time.Second, "a refresh of the older worker", func() bool {
		d, err := rdb.PTTL(ctx, last).Result()
		return err == nil && d > 60*time.Second
	})
	for i := range users {
		k := RedisPresenceKey(BackendUser(i))
		v, err := rdb.Get(ctx, k).Result()
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		ttl, err := rdb.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		if i < taken {
			if v != "200:w1" || ttl > 60*time.Second {
				t.Errorf("%s = %q, TTL %v; want the newer worker's, TTL at most 60s", k, v, ttl)
			}
		} else if v != "100:w1" || ttl <= 60*time.Second {
			t.Errorf("%s = %q, TTL %v; want the older worker's, TTL above 60s", k, v, ttl)
		}
	}
}

// The Rollcall worker tracks every user on one connection, in the
// scenario's group; a reader on the gateway counts them, and reads every
// one offline once the worker has gone.
func TestHoldRollcallAndItsReader(t *testing.T) {
	cfg := node.DefaultConfig()
	cfg.Name, cfg.ClientAddr, cfg.Dev = "g1", "127.0.0.1:0", true
	gw, err := node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := gw.Start(); err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	addr := gw.ClientAddr().String()
	const users = 1500 // two track requests
	stop := startHold(t, HoldConfig{System: Rollcall, Addr: addr, Users: users})
	if n := gw.TrackedCount(); n != users {
		t.Fatalf("the gateway tracks %d", n)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cl, err := client.Dial(ctx, client.Config{Addrs: []string{addr}, User: "reader"})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	r := &rollcallReader{c: cl}
	if n, err := r.present(ctx); err != nil || n != users {
		t.Fatalf("present: %d, %v", n, err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	first, all, err := r.offline(ctx, time.Now(), time.Minute)
	if err != nil || first.IsZero() || all.Before(first) {
		t.Fatalf("offline: first %v, all %v, %v", first, all, err)
	}
}

func TestHoldRefusesABadConfig(t *testing.T) {
	for _, c := range []HoldConfig{
		{System: Redis, Addr: "127.0.0.1:1", Users: 0, Refresh: time.Second, TTL: time.Second},
		{System: Redis, Addr: "127.0.0.1:1", Users: 10, Refresh: time.Second, TTL: 500 * time.Millisecond},
		{System: Centrifuge, Addr: "127.0.0.1:1", Users: 10},
	} {
		if err := Hold(t.Context(), c); err == nil {
			t.Errorf("Hold(%+v) = nil", c)
		}
	}
}

func TestBackendScenarioConfig(t *testing.T) {
	cfg := Config{Scenario: ScenarioBackend, HoldCommand: []string{"bench-compare", "hold"}}
	if err := cfg.defaults(); err != nil {
		t.Fatal(err)
	}
	if cfg.Users != 100_000 || cfg.Heartbeat != 5*time.Second || cfg.Timeout != 15*time.Second {
		t.Fatalf("defaults: %d users, %v, %v", cfg.Users, cfg.Heartbeat, cfg.Timeout)
	}
	sys := &system{name: Redis, addrs: []string{"127.0.0.1:9"}}
	got := strings.Join(holdArgs(cfg, sys), " ")
	if want := "bench-compare hold --system redis --addr 127.0.0.1:9 --users 100000 --refresh 5s --ttl 15s"; got != want {
		t.Fatalf("worker argv\n got %s\nwant %s", got, want)
	}
	bad := []Config{
		{Scenario: ScenarioBackend, HoldCommand: []string{"x"}, Systems: []string{Rollcall, Centrifuge}},
		{Scenario: ScenarioBackend},
		{Scenario: "tracked"},
	}
	for _, c := range bad {
		if err := c.defaults(); err == nil {
			t.Errorf("defaults(%+v) = nil", c)
		}
	}
	if _, err := Run(t.Context(), Config{Scenario: ScenarioBackend, HoldCommand: []string{"x"}}); err == nil {
		t.Error("Run ran the backend scenario")
	}
}

func TestSummarizeBackendPairsRounds(t *testing.T) {
	var samples []BackendSample
	for r, v := range [][2]float64{{3000, 12000}, {3500, 14000}, {4000, 10000}} {
		samples = append(samples, BackendSample{System: Rollcall, Round: r + 1, OfflineAllMS: v[0], ServerCoresPer10k: 1},
			BackendSample{System: Redis, Round: r + 1, OfflineAllMS: v[1], ServerCoresPer10k: 2})
	}
	figs := summarizeBackend([]string{Rollcall, Redis}, samples)
	i := slices.IndexFunc(figs, func(f Figure) bool { return f.Metric == "offline_all_ms" })
	f := figs[i]
	if f.Median[Rollcall] != 3500 || f.Median[Redis] != 12000 || len(f.Ratios) != 1 {
		t.Fatalf("offline_all_ms: %+v", f)
	}
	if r := f.Ratios[0]; !slices.Equal(r.Rounds, []float64{0.25, 0.25, 0.4}) || r.Median != 0.25 {
		t.Fatalf("ratio %+v", r)
	}
	j := slices.IndexFunc(figs, func(f Figure) bool { return f.Metric == "notified_all_ms" })
	if len(figs[j].Median) != 0 {
		t.Fatalf("notified_all_ms measured by none: %+v", figs[j])
	}
}

func TestStallsIn(t *testing.T) {
	log := "2026-12-03T22:01:40.000Z\tWARN\tgossip\tgossip/loop.go:67\tthis gateway was stalled; peer leases extended by the stall\t{\"stall\": \"9s\"}\n" +
		"2026-12-03T22:01:42.743Z\tWARN\tgossip\tgossip/loop.go:67\tthis gateway was stalled; peer leases extended by the stall\t{\"stall\": \"1.84157346s\"}\n" +
		"2026-12-03T22:01:43.000Z\tINFO\tnode\tsomething else\t{\"stall\": \"5s\"}\n" +
		"2026-12-03T22:01:45.061Z\tWARN\tgossip\tgossip/loop.go:67\tthis gateway was stalled; peer leases extended by the stall\t{\"stall\": \"2.141536813s\"}\n"
	p := filepath.Join(t.TempDir(), "rc3-1.log")
	if err := os.WriteFile(p, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	from := time.Date(2026, 12, 3, 22, 1, 41, 0, time.UTC)
	if got, want := stallsIn(p, from, from.Add(10*time.Second)), 1841573460*time.Nanosecond+2141536813*time.Nanosecond; got != want {
		t.Fatalf("stalls %v, want %v", got, want)
	}
	if got := stallsIn(p, from, from.Add(time.Second)); got != 0 {
		t.Fatalf("stalls before the first in the window: %v", got)
	}
}
