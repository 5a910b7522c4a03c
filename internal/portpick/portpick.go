// Package portpick hands out loopback addresses for processes that must be
// told their port before they bind it: agents started as child processes,
// gateways restarted under the same address.
//
// Asking the kernel for port 0, closing the listener and passing the port on
// races with every other socket on the machine: the kernel hands the same
// ephemeral port to the next bind of port 0 or outgoing connection. The
// ports here come from just below the kernel's ephemeral range, which it
// never hands out on its own, and each one is held by an advisory lock file
// for as long as the caller holds it, so processes that pick ports this way
// (test binaries run in parallel, the chaos harness) never pick the same one.
package portpick

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// span is how many ports below the ephemeral range are used.
const span = 12000

// Port is a loopback address held for its caller until Release.
type Port struct {
	Addr string
	lock *os.File
}

// Release gives the port back to other pickers. The address may be in use
// by then; releasing only ends the reservation.
func (p *Port) Release() {
	if p.lock != nil {
		unlock(p.lock)
		p.lock = nil
	}
}

// portRange is [lo, hi): the span below the ephemeral range, or an empty
// range when the ephemeral range starts too low to leave one.
func portRange() (lo, hi int) {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil {
				low = v
			}
		}
	}
	if low-span < 1024 {
		return 0, 0
	}
	return low - span, low
}

// Loopback returns a free 127.0.0.1 address, with its TCP port free and,
// when udp is set, its UDP port too (memberlist binds both).
func Loopback(udp bool) (*Port, error) {
	lo, hi := portRange()
	if lo == hi {
		return kernelPick(udp)
	}
	dir := filepath.Join(os.TempDir(), "rollcall-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, fmt.Errorf("port lock directory: %w", err)
	}
	n := hi - lo
	start := rand.IntN(n)
	for i := range n {
		port := lo + (start+i)%n
		f, err := tryLock(filepath.Join(dir, strconv.Itoa(port)))
		if err != nil {
			continue
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if free(addr, udp) {
			return &Port{Addr: addr, lock: f}, nil
		}
		unlock(f)
	}
	return nil, errors.New("no free loopback port below the ephemeral range")
}

// free reports whether addr can be bound now.
func free(addr string, udp bool) bool {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	ln.Close()
	if udp {
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			return false
		}
		pc.Close()
	}
	return true
}

// kernelPick is the fallback where no range is left below the ephemeral
// one: a port the kernel chose, free a moment ago.
func kernelPick(udp bool) (*Port, error) {
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		addr := ln.Addr().String()
		ln.Close()
		if !udp || free(addr, true) {
			return &Port{Addr: addr}, nil
		}
	}
	return nil, errors.New("no free loopback port")
}
