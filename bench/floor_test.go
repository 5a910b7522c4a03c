package bench

import (
	"context"
	"net"
	"slices"
	"testing"
	"time"
)

// startFloor starts n floor nodes in process and returns their TCP
// addresses and UDP addresses.
func startFloor(t *testing.T, n int) (tcp, udp []string) {
	t.Helper()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		tcp, udp = append(tcp, ln.Addr().String()), append(udp, pc.LocalAddr().String())
		_ = ln.Close()
		_ = pc.Close()
	}
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, n)
	for i := range n {
		go func() { errs <- ServeFloorNode(ctx, tcp[i], udp[i], slices.Concat(udp[:i], udp[i+1:])) }()
	}
	t.Cleanup(func() {
		cancel()
		for range n {
			if err := <-errs; err != nil {
				t.Errorf("floor node: %v", err)
			}
		}
	})
	for _, a := range tcp {
		deadline := time.Now().Add(5 * time.Second)
		for {
			c, err := net.Dial("tcp", a)
			if err == nil {
				_ = c.Close()
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("floor node %s never listened: %v", a, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return tcp, udp
}

// Every message the floor probe sends through one node reaches it at
// each of the others, and is timed.
func TestFloorProbeTimesEveryRelayedMessage(t *testing.T) {
	tcp, _ := startFloor(t, 3)
	rep, err := RunFloorProbe(t.Context(), tcp, 200, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Sent < 10 {
		t.Fatalf("sent %d messages in 300 ms at 200/s", rep.Sent)
	}
	if got, want := rep.Propagation.Count, uint64(2*rep.Sent); got != want {
		t.Fatalf("timed %d arrivals of %d messages through 3 nodes, want %d (each at the 2 others)", got, rep.Sent, want)
	}
	if rep.Propagation.P50 <= 0 || rep.Propagation.Max < rep.Propagation.P50 {
		t.Fatalf("propagation %+v", rep.Propagation)
	}
	if rep.Priority == "" {
		t.Fatal("the report does not say what scheduling the probe got")
	}
}

// A packet that is not a floor message is dropped; the node goes on
// relaying.
func TestFloorNodeDropsStrayPackets(t *testing.T) {
	tcp, udp := startFloor(t, 2)
	c, err := net.Dial("udp", udp[1])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Sent while the probe is connected: a stray packet relayed would be
	// timed as one more arrival.
	stray := time.AfterFunc(300*time.Millisecond, func() {
		_, _ = c.Write([]byte("not a floor message, longer than sixteen bytes"))
		_, _ = c.Write([]byte("short"))
	})
	defer stray.Stop()
	rep, err := RunFloorProbe(t.Context(), tcp, 100, 600*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := rep.Propagation.Count, uint64(rep.Sent); got != want {
		t.Fatalf("timed %d arrivals of %d messages through 2 nodes, want %d", got, rep.Sent, want)
	}
}

func TestFloorProbeRefusesBadArguments(t *testing.T) {
	for _, tc := range []struct {
		nodes    []string
		rate     float64
		duration time.Duration
	}{
		{[]string{"127.0.0.1:1"}, 10, time.Second},
		{[]string{"127.0.0.1:1", "127.0.0.1:2"}, 0, time.Second},
		{[]string{"127.0.0.1:1", "127.0.0.1:2"}, 10, 0},
	} {
		if _, err := RunFloorProbe(t.Context(), tc.nodes, tc.rate, tc.duration); err == nil {
			t.Errorf("RunFloorProbe(%v, %v, %v) = nil error", tc.nodes, tc.rate, tc.duration)
		}
	}
}
