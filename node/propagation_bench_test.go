package node_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/rollcall/rollcall/client"
	"github.com/rollcall/rollcall/internal/testcluster"
)

// BenchmarkPropagation measures change-to-event latency across a cluster
// of three gateways joined by real gossip over loopback: a writer on g0
// changes its status, and a subscriber on g2 gets the event. Each
// iteration is one change, isolated from the last by a pause longer than
// the coalescing windows; it reports p50 and p99 (ms).
//
// "idle" has no other traffic; "load" keeps background sessions on g0 and
// g1 changing status at ROLLCALL_BENCH_RATE changes per second (default
// 300) while a watcher on g2 subscribes to their group, so g2's event
// window and g0's gossip batch are busy. ROLLCALL_BENCH_SESSIONS sets the
// number of background sessions (default 200). ROLLCALL_BENCH_COALESCE
// and ROLLCALL_BENCH_BATCH set node.Config.EventCoalesce and
// gossip.Config.BatchDelay (durations; default the defaults).
//
//	go test ./node -run '^$' -bench Propagation -benchtime 300x
func BenchmarkPropagation(b *testing.B) {
	opt := testcluster.Options{
		Timeout: 10 * time.Second, Heartbeat: 3 * time.Second,
		EventCoalesce: envDuration(b, "ROLLCALL_BENCH_COALESCE"),
		GossipBatch:   envDuration(b, "ROLLCALL_BENCH_BATCH"),
	}
	rate, sessions := envInt(b, "ROLLCALL_BENCH_RATE", 300), envInt(b, "ROLLCALL_BENCH_SESSIONS", 200)
	b.Run("idle", func(b *testing.B) { benchPropagation(b, opt, 0, 0) })
	b.Run("load", func(b *testing.B) { benchPropagation(b, opt, sessions, rate) })
}

func benchPropagation(b *testing.B, opt testcluster.Options, sessions, rate int) {
	gs := testcluster.Start(b, 3, opt)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dial := func(g *testcluster.Gateway, user string, groups ...string) *client.Client {
		c, err := client.Dial(ctx, client.Config{Addrs: []string{g.GW.ClientAddr().String()}, User: user,
			Device: "d", Groups: groups, EventBuffer: 1024})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = c.Close() })
		return c
	}
	writer := dial(gs[0], "writer")
	reader := dial(gs[2], "reader")
	sub, err := reader.Subscribe(ctx, "writer")
	if err != nil {
		b.Fatal(err)
	}
	events := sub.Events()
	await := func(status string) {
		timeout := time.After(10 * time.Second)
		for {
			select {
			case e := <-events:
				if e.Online && e.Status == status {
					return
				}
			case <-timeout:
				b.Fatalf("no event with status %s", status)
			}
		}
	}
	await("available")

	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	if sessions > 0 {
		bg := make([]*client.Client, sessions)
		for i := range bg {
			bg[i] = dial(gs[i%2], "bg"+strconv.Itoa(i), "bg")
		}
		watcher := dial(gs[2], "watcher")
		wsub, err := watcher.SubscribeGroup(ctx, "bg")
		if err != nil {
			b.Fatal(err)
		}
		wg.Add(2)
		go func() { // the watcher drains
			defer wg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case <-wsub.Events():
				}
			}
		}()
		go func() { // the background changes, at rate per second
			defer wg.Done()
			tick := time.NewTicker(time.Second / time.Duration(rate))
			defer tick.Stop()
			statuses := []string{"available", "away", "busy"}
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				c := bg[rand.IntN(len(bg))]
				go func() { _ = c.Status(ctx, statuses[rand.IntN(len(statuses))]) }()
			}
		}()
		time.Sleep(500 * time.Millisecond) // let the load settle
	}

	lat := make([]time.Duration, 0, b.N)
	statuses := []string{"away", "available"}
	b.ResetTimer()
	for i := range b.N {
		time.Sleep(20*time.Millisecond + rand.N(10*time.Millisecond))
		st := statuses[i%2]
		start := time.Now()
		if err := writer.Status(ctx, st); err != nil {
			b.Fatal(err)
		}
		await(st)
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))]) / 1e6 }
	b.ReportMetric(q(0.5), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(0, "ns/op")
}

func envDuration(b *testing.B, name string) time.Duration {
	s := os.Getenv(name)
	if s == "" {
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		b.Fatalf("%s: %v", name, err)
	}
	return d
}

func envInt(b *testing.B, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	v, err := strconv.Atoi(s)
	if err != nil || v <= 0 {
		b.Fatal(fmt.Errorf("%s: want a positive integer, got %q", name, s))
	}
	return v
}
