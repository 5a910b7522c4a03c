package gossip

import (
	"errors"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// FaultNetwork injects faults between the nodes of an in-process cluster:
// packet loss, delay, and one-way or two-way partitions, changeable at any
// time. Each node's transport is wrapped with Wrap. Faults apply to the
// sender's outbound packets and stream dials, so a one-way partition a->b
// stops a's traffic to b while b still reaches a.
type FaultNetwork struct {
	mu      sync.RWMutex
	loss    float64
	delay   time.Duration
	jitter  time.Duration
	blocked map[[2]string]bool // [from, to] gossip addresses
	held    map[string]bool    // gossip addresses whose packets are held (Hold)
	queued  []func()           // held packets' deliveries, in send order
	rng     *rand.Rand
	drops   int64 // packets dropped by loss or partition
}

// Dropped returns how many packets were dropped by loss or partition.
func (f *FaultNetwork) Dropped() int64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.drops
}

// NewFaultNetwork returns a fault-free network; seed makes loss repeatable.
func NewFaultNetwork(seed uint64) *FaultNetwork {
	return &FaultNetwork{blocked: make(map[[2]string]bool), held: make(map[string]bool), rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// SetLoss sets the probability in [0,1] that a packet is dropped. Streams
// (TCP) are not subject to loss.
func (f *FaultNetwork) SetLoss(p float64) {
	f.mu.Lock()
	f.loss = p
	f.mu.Unlock()
}

// SetDelay delays every packet by d plus up to jitter.
func (f *FaultNetwork) SetDelay(d, jitter time.Duration) {
	f.mu.Lock()
	f.delay, f.jitter = d, jitter
	f.mu.Unlock()
}

// Block cuts traffic from -> to (one way).
func (f *FaultNetwork) Block(from, to string) {
	f.mu.Lock()
	f.blocked[[2]string{from, to}] = true
	f.mu.Unlock()
}

// Partition cuts all traffic both ways between every address in a and
// every address in b.
func (f *FaultNetwork) Partition(a, b []string) {
	f.mu.Lock()
	for _, x := range a {
		for _, y := range b {
			f.blocked[[2]string{x, y}] = true
			f.blocked[[2]string{y, x}] = true
		}
	}
	f.mu.Unlock()
}

// Heal removes every partition and block (loss and delay stay).
func (f *FaultNetwork) Heal() {
	f.mu.Lock()
	f.blocked = make(map[[2]string]bool)
	f.mu.Unlock()
}

// Hold holds every packet from or to addr, as the sockets of a stopped
// process (SIGSTOP, a paused VM) do: nothing it sends leaves, and what is
// sent to it waits unread. Release delivers them. Stream dials from or to
// addr fail meanwhile.
func (f *FaultNetwork) Hold(addr string) {
	f.mu.Lock()
	f.held[addr] = true
	f.mu.Unlock()
}

// Release ends every Hold and delivers the held packets, in the order they
// were sent.
func (f *FaultNetwork) Release() {
	f.mu.Lock()
	q := f.queued
	f.queued, f.held = nil, make(map[string]bool)
	f.mu.Unlock()
	for _, deliver := range q {
		deliver()
	}
}

// hold queues the packet b that t sends to addr if it is held, and
// reports whether it did.
func (f *FaultNetwork) hold(t *faultyTransport, b []byte, addr memberlist.Address) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.held[t.self] && !f.held[addr.Addr] {
		return false
	}
	cp := append([]byte(nil), b...)
	f.queued = append(f.queued, func() { _, _ = t.NodeAwareTransport.WriteToAddress(cp, addr) })
	return true
}

// verdict decides a packet's fate: dropped, or delivered after delay.
func (f *FaultNetwork) verdict(from, to string, packet bool) (drop bool, delay time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.blocked[[2]string{from, to}] || (!packet && (f.held[from] || f.held[to])) {
		f.drops++
		return true, 0
	}
	if packet && f.loss > 0 && f.rng.Float64() < f.loss {
		f.drops++
		return true, 0
	}
	delay = f.delay
	if f.jitter > 0 {
		delay += time.Duration(f.rng.Int64N(int64(f.jitter)))
	}
	return false, delay
}

// Wrap returns a transport-wrapping function for Config.WrapTransport. The
// node's own gossip address is learned from the transport.
func (f *FaultNetwork) Wrap(t memberlist.NodeAwareTransport) memberlist.NodeAwareTransport {
	return &faultyTransport{NodeAwareTransport: t, net: f}
}

// faultyTransport applies a FaultNetwork's faults to one node's transport.
type faultyTransport struct {
	memberlist.NodeAwareTransport
	net  *FaultNetwork
	once sync.Once
	self string
}

var _ memberlist.NodeAwareTransport = (*faultyTransport)(nil)

// errPartitioned is returned for a stream dial across a partition.
var errPartitioned = errors.New("fault injection: partitioned")

func (t *faultyTransport) FinalAdvertiseAddr(ip string, port int) (net.IP, int, error) {
	a, p, err := t.NodeAwareTransport.FinalAdvertiseAddr(ip, port)
	if err == nil {
		t.once.Do(func() { t.self = net.JoinHostPort(a.String(), strconv.Itoa(p)) })
	}
	return a, p, err
}

func (t *faultyTransport) WriteToAddress(b []byte, addr memberlist.Address) (time.Time, error) {
	drop, delay := t.net.verdict(t.self, addr.Addr, true)
	now := time.Now()
	if drop {
		return now, nil // silently lost, as on a real network
	}
	if delay > 0 {
		cp := append([]byte(nil), b...)
		time.AfterFunc(delay, func() {
			if !t.net.hold(t, cp, addr) {
				_, _ = t.NodeAwareTransport.WriteToAddress(cp, addr)
			}
		})
		return now, nil
	}
	if t.net.hold(t, b, addr) {
		return now, nil
	}
	return t.NodeAwareTransport.WriteToAddress(b, addr)
}

func (t *faultyTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	return t.WriteToAddress(b, memberlist.Address{Addr: addr})
}

func (t *faultyTransport) DialAddressTimeout(addr memberlist.Address, timeout time.Duration) (net.Conn, error) {
	if drop, _ := t.net.verdict(t.self, addr.Addr, false); drop {
		return nil, errPartitioned
	}
	return t.NodeAwareTransport.DialAddressTimeout(addr, timeout)
}

func (t *faultyTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}
