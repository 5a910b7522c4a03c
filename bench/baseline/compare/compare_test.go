package compare

import (
	"context"
	"os"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/rollcall/rollcall/bench/baseline/redisgw"
	"github.com/rollcall/rollcall/bench/baseline/redistest"
)

func TestLoadAgainstTwoBaselineGateways(t *testing.T) {
	addr := redistest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	var addrs []string
	done := make(chan error, 2)
	for _, name := range []string{"rgw1", "rgw2"} {
		g, err := redisgw.New(ctx, "127.0.0.1:0", redisgw.Config{Name: name, Redis: addr, Logger: zaptest.NewLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, g.Addr().String())
		go func() { done <- g.Serve(ctx) }()
	}
	defer func() {
		cancel()
		for range 2 {
			if err := <-done; err != nil {
				t.Error(err)
			}
		}
	}()
	r, err := Load(context.Background(), LoadConfig{Addrs: addrs, Sessions: 40, Heartbeat: 100 * time.Millisecond,
		StatusRate: 50, Subscribers: 5, Duration: time.Second, PIDs: []int{os.Getpid()}})
	if err != nil {
		t.Fatal(err)
	}
	// every subscriber got its 10 initial events at least; heartbeats
	// flowed; nothing was refused or lost
	if r.Connected != 40 || r.Heartbeats == 0 || r.Events < 50 || r.Errors != 0 || r.Lost != 0 {
		t.Fatalf("load result %+v", r)
	}
}

func TestLastJSONAndMedian(t *testing.T) {
	m, err := lastJSON([]byte("starting\n{\"heartbeats\":1}\nnoise\n{\"heartbeats\":2,\"server_cpu_seconds\":0.5}\n"))
	if err != nil || m["heartbeats"] != 2.0 {
		t.Fatalf("lastJSON: %v %v", m, err)
	}
	if m, err := lastJSON([]byte("{\n  \"heartbeats\": 3\n}\n")); err != nil || m["heartbeats"] != 3.0 {
		t.Fatalf("indented: %v %v", m, err)
	}
	if _, err := lastJSON([]byte("no json")); err == nil {
		t.Fatal("no JSON accepted")
	}
	if median([]float64{3, 1, 2}) != 2 || median([]float64{4, 1, 3, 2}) != 2.5 || median(nil) != 0 {
		t.Fatal("median")
	}
}
