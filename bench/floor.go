package bench

// The propagation floor: the cheapest path a change could take across a
// cluster's topology on this machine, measured beside the real system.
//
// A floor node does nothing but relay. A 16-byte message read from one of
// its TCP clients goes, in one UDP packet each, to the other floor nodes,
// which write it to every TCP client of theirs: the hops of a status
// change from a writer on gateway A to a subscriber on B (client → A, A →
// B, B → subscriber), with no protocol, no state and no batching, on the
// same cores as the system measured. The floor probe, a process of its
// own at raised priority like the load's probe, sends timestamped messages
// through each node in turn and times their arrival at its connections to
// the others. What the system's probe measures beyond the floor's is the
// system's own cost; what the floor measures is the machine's (its
// scheduling, its wake-ups, the other load on the cores).

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// floorMsgSize is the size of a floor message: when the probe sent it
// (ns on its monotonic clock, since it started) and the index of the node
// it was sent through.
const floorMsgSize = 16

// ServeFloorNode relays until ctx ends: what its TCP clients at tcpAddr
// send goes over UDP (from udpAddr) to peers, and what peers send is
// written to every client. It returns when ctx ends, or when a listener
// cannot be opened.
func ServeFloorNode(ctx context.Context, tcpAddr, udpAddr string, peers []string) error {
	pc, err := net.ListenPacket("udp", udpAddr)
	if err != nil {
		return fmt.Errorf("floor node: %w", err)
	}
	defer pc.Close()
	var to []net.Addr
	for _, p := range peers {
		a, err := net.ResolveUDPAddr("udp", p)
		if err != nil {
			return fmt.Errorf("floor node: peer %q: %w", p, err)
		}
		to = append(to, a)
	}
	ln, err := net.Listen("tcp", tcpAddr)
	if err != nil {
		return fmt.Errorf("floor node: %w", err)
	}
	defer ln.Close()
	context.AfterFunc(ctx, func() { _ = ln.Close(); _ = pc.Close() })

	var mu sync.Mutex
	var clients []net.Conn
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range clients {
			_ = c.Close()
		}
	}()
	go func() { // peers → clients
		buf := make([]byte, 2048) // a longer packet is read whole, and dropped
		for {
			n, _, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if n != floorMsgSize {
				continue
			}
			mu.Lock()
			for _, c := range clients {
				_, _ = c.Write(buf[:n])
			}
			mu.Unlock()
		}
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("floor node: accept: %w", err)
		}
		mu.Lock()
		clients = append(clients, c)
		mu.Unlock()
		go func() { // client → peers
			buf := make([]byte, floorMsgSize)
			for {
				if _, err := io.ReadFull(c, buf); err != nil {
					return
				}
				for _, a := range to {
					_, _ = pc.WriteTo(buf, a)
				}
			}
		}()
	}
}

// FloorReport is what a floor probe measured.
type FloorReport struct {
	// Priority is the scheduling the probe got: "fifo", "nice" or
	// "normal" (see ProbeReport).
	Priority string `json:"priority"`
	Sent     int    `json:"sent"`
	// Propagation is from a message's send to its arrival at the probe's
	// connection to each other node.
	Propagation Quantiles `json:"propagation_ms"`
}

// RunFloorProbe connects to every floor node, then for duration sends
// rate messages per second, through each node in turn, and reports their
// propagation to the other nodes. It first raises its scheduling priority
// (SCHED_FIFO where permitted), as the load's probe does.
func RunFloorProbe(ctx context.Context, nodes []string, rate float64, duration time.Duration) (FloorReport, error) {
	if len(nodes) < 2 {
		return FloorReport{}, errors.New("floor probe: want at least 2 nodes")
	}
	if rate <= 0 || duration <= 0 {
		return FloorReport{}, errors.New("floor probe: want a positive rate and duration")
	}
	rep := FloorReport{Priority: raisePriority()}
	conns := make([]net.Conn, len(nodes))
	for i, a := range nodes {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", a)
		if err != nil {
			return rep, fmt.Errorf("floor probe: %w", err)
		}
		defer c.Close()
		conns[i] = c
	}
	epoch := time.Now() // messages carry the monotonic time since
	now := func() int64 { return int64(time.Since(epoch)) }
	var mu sync.Mutex
	var h Histogram
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Go(func() {
			buf := make([]byte, floorMsgSize)
			for {
				if _, err := io.ReadFull(c, buf); err != nil {
					return
				}
				if int(binary.LittleEndian.Uint64(buf[8:])) == i {
					continue // not relayed: sent through this node
				}
				d := time.Duration(now() - int64(binary.LittleEndian.Uint64(buf)))
				mu.Lock()
				h.Record(d)
				mu.Unlock()
			}
		})
	}
	// The nodes learn of their clients as they accept them: a message
	// sent before the last is accepted would miss it.
	time.Sleep(100 * time.Millisecond)
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	end := time.After(duration)
	buf := make([]byte, floorMsgSize)
loop:
	for k := 0; ; k++ {
		select {
		case <-ctx.Done():
			return rep, ctx.Err()
		case <-end:
			break loop
		case <-tick.C:
		}
		i := k % len(conns)
		binary.LittleEndian.PutUint64(buf, uint64(now()))
		binary.LittleEndian.PutUint64(buf[8:], uint64(i))
		if _, err := conns[i].Write(buf); err != nil {
			return rep, fmt.Errorf("floor probe: %w", err)
		}
		rep.Sent++
	}
	// Messages still in flight get the longest wait the window allows
	// them; later ones are not counted.
	time.Sleep(200 * time.Millisecond)
	for _, c := range conns {
		_ = c.Close()
	}
	wg.Wait()
	rep.Propagation = QuantilesOf(&h)
	return rep, nil
}
