package gossip

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// MemNetwork is an in-process network for the nodes of one process: their
// packets and streams go through memory instead of the kernel's sockets.
// memberlist, the core and the loop run as they do over sockets; only the
// transport under memberlist differs. It exists for measurements of many
// nodes in one process, where the kernel's loopback path, paid once per
// packet by a machine that runs every node, is most of the CPU (a hundred
// members at a thousand changes a second send a hundred thousand packets a
// second): a deployed node pays for its own packets on its own cores.
//
// A packet is handed over at once, or dropped when the receiver's queue of
// memberlist packets is full, as a socket's receive buffer would drop it.
// A stream is a net.Pipe. Faults are injected by wrapping the transport, as
// over sockets (Config.WrapTransport).
type MemNetwork struct {
	mu sync.Mutex // held to change nodes
	// nodes is the transports by address; a map once published is never
	// changed (a node's arrival or departure publishes a new one): a
	// packet's sender looks its receiver up without a lock.
	nodes atomic.Pointer[map[string]*memTransport]
	next  int // the next port to give out
	// dropped counts packets dropped because a receiver's queue of
	// memberlist packets was full.
	dropped atomic.Uint64
}

// Dropped returns how many packets were dropped because a receiver's
// queue of memberlist packets was full.
func (n *MemNetwork) Dropped() uint64 { return n.dropped.Load() }

// NewMemNetwork returns an empty in-process network.
func NewMemNetwork() *MemNetwork {
	n := &MemNetwork{next: 10000}
	n.nodes.Store(&map[string]*memTransport{})
	return n
}

// change publishes a copy of the nodes changed by f. Called with mu held.
func (n *MemNetwork) change(f func(map[string]*memTransport)) {
	m := maps.Clone(*n.nodes.Load())
	f(m)
	n.nodes.Store(&m)
}

// memPacketQueue is how many memberlist packets (probes, acks, its
// gossip) may wait for memberlist's packet listener at one node.
const memPacketQueue = 4096

// listen returns a transport on ip and a port of its own (port 0) or the
// one given.
func (n *MemNetwork) listen(ip string, port int) (*memTransport, error) {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return nil, fmt.Errorf("bind address %q is not an IP address: %w", ip, err)
	}
	if a.IsUnspecified() {
		a = netip.MustParseAddr("127.0.0.1")
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if port == 0 {
		port = n.next
		n.next++
	}
	ap := netip.AddrPortFrom(a, uint16(port))
	addr := ap.String()
	if _, ok := (*n.nodes.Load())[addr]; ok {
		return nil, fmt.Errorf("address %s already in use", addr)
	}
	t := &memTransport{net: n, addr: ap, name: addr,
		packetCh: make(chan *memberlist.Packet, memPacketQueue), streamCh: make(chan net.Conn),
		done: make(chan struct{})}
	n.change(func(m map[string]*memTransport) { m[addr] = t })
	return t, nil
}

func (n *MemNetwork) lookup(addr string) *memTransport { return (*n.nodes.Load())[addr] }

// memTransport is one node's memberlist.NodeAwareTransport on a MemNetwork.
type memTransport struct {
	net      *MemNetwork
	addr     netip.AddrPort
	name     string
	packetCh chan *memberlist.Packet
	streamCh chan net.Conn
	done     chan struct{}
	once     sync.Once
	// userMsgs, once set (deliverUserMessages), receives the payload of
	// each plain packet that holds one user message, as netTransport's.
	userMsgs atomic.Pointer[func([]byte)]
}

var _ memberlist.NodeAwareTransport = (*memTransport)(nil)

var errMemUnreachable = errors.New("in-process network: no node at this address")

func (t *memTransport) port() int { return int(t.addr.Port()) }

func (t *memTransport) FinalAdvertiseAddr(ip string, port int) (net.IP, int, error) {
	if ip != "" {
		a, err := parseAdvertiseIP(ip)
		return a, port, err
	}
	return net.IP(t.addr.Addr().AsSlice()), t.port(), nil
}

func (t *memTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	return t.WriteToAddress(b, memberlist.Address{Addr: addr})
}

// WriteToAddress hands b to the node at a.Addr: its user message straight
// to its loop's queue, any other packet to memberlist's listener.
func (t *memTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	now := time.Now()
	to := t.net.lookup(a.Addr)
	if to == nil {
		return now, nil // lost, as a packet to a closed port is
	}
	if deliver := to.userMsgs.Load(); deliver != nil {
		if msg, ok := plainUserMessage(b); ok {
			(*deliver)(slices.Clone(msg))
			return now, nil
		}
	}
	p := &memberlist.Packet{Buf: slices.Clone(b), From: net.UDPAddrFromAddrPort(t.addr), Timestamp: now}
	select {
	case to.packetCh <- p:
	case <-to.done:
	default:
		t.net.dropped.Add(1)
	}
	return now, nil
}

func (t *memTransport) PacketCh() <-chan *memberlist.Packet { return t.packetCh }

func (t *memTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

// DialAddressTimeout hands one end of a pipe to the node at a.Addr, which
// accepts it through its StreamCh.
func (t *memTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	to := t.net.lookup(a.Addr)
	if to == nil {
		return nil, errMemUnreachable
	}
	local, remote := net.Pipe()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case to.streamCh <- remote:
		return local, nil
	case <-to.done:
	case <-timer.C:
	}
	_ = local.Close()
	_ = remote.Close()
	return nil, fmt.Errorf("in-process network: dial %s: %w", a.Addr, errMemUnreachable)
}

func (t *memTransport) StreamCh() <-chan net.Conn { return t.streamCh }

// Shutdown takes the node off the network: packets to it are lost and
// dials to it fail.
func (t *memTransport) Shutdown() error {
	t.once.Do(func() {
		t.net.mu.Lock()
		if (*t.net.nodes.Load())[t.name] == t {
			t.net.change(func(m map[string]*memTransport) { delete(m, t.name) })
		}
		t.net.mu.Unlock()
		close(t.done)
	})
	return nil
}

// deliverUserMessages is netTransport's (see there).
func (t *memTransport) deliverUserMessages(deliver func([]byte)) { t.userMsgs.Store(&deliver) }
