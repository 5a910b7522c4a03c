// Command hbgen holds many heartbeating client sessions on a gateway, for
// measuring the gateway's memory and CPU per idle session
// (docs/performance.md). It is a measurement tool, not a client library:
//
//	go -C benchlab run ./internal/hbgen -addr 127.0.0.1:7400 -n 9990 -src 127.0.1.1 -ips 100
//
// It opens n connections, source addresses spread over -ips consecutive
// addresses starting at -src (so the ephemeral ports of one address do not
// run out), sends each a hello (a --dev gateway accepts it without a token),
// waits for every welcome, prints "ready <n>" and then sends each session a
// plain heartbeat every -hb, spread evenly over the interval, until it is
// interrupted or -hold passes. Each -report it prints the heartbeats sent.
//
//	hbgen bench --addrs A,B,C --sessions 19000 --heartbeat 95ms --warmup 5s --duration 20s --pids P,Q --format json
//
// takes the flags of `rollcall bench` and prints its JSON report, with
// what a load of plain heartbeats measures: sessions, heartbeats sent and
// the servers' CPU and RSS (bench-compare run --raw). It heartbeats only
// once every session is connected, so a rate that saturates it does not
// starve its connects.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "bench" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		c, err := parseBench(os.Args[2:], os.Stderr)
		if err == nil {
			err = runBench(ctx, c, os.Stdout, os.Stderr)
		}
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, "hbgen bench:", err)
			os.Exit(1)
		}
		return
	}
	addr := flag.String("addr", "127.0.0.1:7400", "gateway client address")
	n := flag.Int("n", 1000, "sessions to hold")
	src := flag.String("src", "127.0.1.1", "first source address")
	ips := flag.Int("ips", 50, "consecutive source addresses to spread the connections over")
	hb := flag.Duration("hb", 5*time.Second, "heartbeat interval per session")
	hold := flag.Duration("hold", 0, "how long to hold the sessions (0: until interrupted)")
	user := flag.String("user", "hb", "user name prefix (make it differ between generators)")
	report := flag.Duration("report", 10*time.Second, "progress report interval")
	flag.Parse()
	if err := run(*addr, *n, *src, *ips, *hb, *hold, *user, *report); err != nil {
		fmt.Fprintln(os.Stderr, "hbgen:", err)
		os.Exit(1)
	}
}

func run(addr string, n int, src string, ips int, hb, hold time.Duration, user string, report time.Duration) error {
	first, err := netip.ParseAddr(src)
	if err != nil {
		return fmt.Errorf("-src: %w", err)
	}
	sources := make([]netip.Addr, max(ips, 1))
	sources[0] = first
	for i := 1; i < len(sources); i++ {
		sources[i] = sources[i-1].Next()
	}
	conns := make([]net.Conn, n)
	// Dial with a few workers; each reads its welcome before the next dial.
	const workers = 16
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				nc, err := dialSession(context.Background(), addr, sources[i%len(sources)], fmt.Sprintf("%s%d", user, i))
				if err != nil {
					errs <- fmt.Errorf("session %d: %w", i, err)
					return
				}
				conns[i] = nc
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	fmt.Printf("ready %d\n", n)

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, os.Interrupt)
	var end <-chan time.Time
	if hold > 0 {
		end = time.After(hold)
	}
	// 100 slots per interval: each tick heartbeats a hundredth of the
	// sessions.
	const slots = 100
	tick := time.NewTicker(hb / slots)
	defer tick.Stop()
	rep := time.NewTicker(report)
	defer rep.Stop()
	line := []byte("{\"op\":\"hb\"}\n")
	sent, failed, slot := 0, 0, 0
	for {
		select {
		case <-stop:
			return closeAll(conns)
		case <-end:
			return closeAll(conns)
		case <-rep.C:
			fmt.Printf("heartbeats %d failed %d\n", sent, failed)
		case <-tick.C:
			for i := slot; i < n; i += slots {
				if conns[i] == nil {
					continue
				}
				conns[i].SetWriteDeadline(time.Now().Add(time.Second))
				if _, err := conns[i].Write(line); err != nil {
					failed++
					conns[i].Close()
					conns[i] = nil
					continue
				}
				sent++
			}
			slot = (slot + 1) % slots
		}
	}
}

// dialSession connects from src to addr, says hello as user (a --dev
// gateway accepts it without a token) and reads the welcome.
func dialSession(ctx context.Context, addr string, src netip.Addr, user string) (net.Conn, error) {
	d := net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: src.AsSlice()}}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("dial: %w", err)
	}
	fmt.Fprintf(nc, `{"op":"hello","user":"%s","device":"d"}`+"\n", user)
	_ = nc.SetReadDeadline(time.Now().Add(30 * time.Second))
	line, err := bufio.NewReaderSize(nc, 512).ReadString('\n')
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("welcome: %w", err)
	}
	if len(line) < 16 || line[:16] != `{"op":"welcome",` {
		nc.Close()
		return nil, fmt.Errorf("welcome: got %q", line)
	}
	_ = nc.SetReadDeadline(time.Time{})
	return nc, nil
}

func closeAll(conns []net.Conn) error {
	for _, nc := range conns {
		if nc != nil {
			nc.Close()
		}
	}
	return nil
}
