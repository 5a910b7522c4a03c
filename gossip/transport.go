package gossip

// The network transport under memberlist: one TCP listener and one UDP
// socket on the gossip address.
//
// memberlist's own NetTransport reads every UDP packet into a fresh 64 KB
// buffer. At the change rates of a presence cluster that is most of a
// gateway's allocation: tens of megabytes a second at a thousand packets,
// so the collector runs many times a second, and in a quiet cluster the
// scavenger returns those pages to the kernel between packets, so each
// packet's buffer faults its pages in again before the read. This one
// reads into one buffer per socket and hands memberlist a copy of the
// packet's own size. Otherwise it behaves as NetTransport does (the same
// advertise address rules, receive buffer, accept back-off and metric).

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	gometrics "github.com/hashicorp/go-metrics"
	"github.com/hashicorp/go-sockaddr"
	"github.com/hashicorp/memberlist"
)

const (
	// maxPacketSize is the largest UDP payload read: larger ones are
	// truncated by the kernel (memberlist sends at most UDPBufferSize,
	// 1400 bytes by default).
	maxPacketSize = 65536
	// udpReadBuffer is the socket receive buffer asked for, halved until
	// the kernel accepts it (NetTransport's figure).
	udpReadBuffer = 2 * 1024 * 1024
)

// netTransport is a memberlist.NodeAwareTransport on one address.
type netTransport struct {
	bindIP   net.IP
	tcp      *net.TCPListener
	udp      *net.UDPConn
	logger   *log.Logger
	packetCh chan *memberlist.Packet
	streamCh chan net.Conn
	shutdown atomic.Bool
	wg       sync.WaitGroup
	// userMsgs, once set (deliverUserMessages), receives the payload of
	// each plain packet that holds one user message, instead of
	// memberlist.
	userMsgs atomic.Pointer[func([]byte)]
}

var _ memberlist.NodeAwareTransport = (*netTransport)(nil)

// newTransport listens on ip:port, TCP and UDP (port 0: a port the kernel
// picks for TCP, free for UDP too, tried up to 10 times), and starts
// reading.
func newTransport(ip string, port int, logger *log.Logger) (*netTransport, error) {
	bindIP := net.ParseIP(ip)
	if bindIP == nil {
		return nil, fmt.Errorf("bind address %q is not an IP address", ip)
	}
	if port != 0 {
		return listen(bindIP, port, logger)
	}
	var err error
	for range 10 {
		var t *netTransport
		if t, err = listen(bindIP, 0, logger); err == nil {
			return t, nil
		}
	}
	return nil, err
}

func listen(bindIP net.IP, port int, logger *log.Logger) (*netTransport, error) {
	ip := bindIP.String()
	tcp, err := net.ListenTCP("tcp", &net.TCPAddr{IP: bindIP, Port: port})
	if err != nil {
		return nil, fmt.Errorf("TCP listener on %s: %w", net.JoinHostPort(ip, fmt.Sprint(port)), err)
	}
	port = tcp.Addr().(*net.TCPAddr).Port
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: bindIP, Port: port})
	if err != nil {
		_ = tcp.Close()
		return nil, fmt.Errorf("UDP socket on %s: %w", net.JoinHostPort(ip, fmt.Sprint(port)), err)
	}
	if err := setReadBuffer(udp); err != nil {
		_ = tcp.Close()
		_ = udp.Close()
		return nil, fmt.Errorf("UDP receive buffer: %w", err)
	}
	t := &netTransport{bindIP: bindIP, tcp: tcp, udp: udp, logger: logger,
		packetCh: make(chan *memberlist.Packet), streamCh: make(chan net.Conn)}
	t.wg.Add(2)
	go t.acceptStreams()
	go t.readPackets()
	return t, nil
}

func setReadBuffer(c *net.UDPConn) error {
	var err error
	for size := udpReadBuffer; size > 0; size /= 2 {
		if err = c.SetReadBuffer(size); err == nil {
			return nil
		}
	}
	return err
}

// port is the port bound, TCP and UDP.
func (t *netTransport) port() int { return t.tcp.Addr().(*net.TCPAddr).Port }

// parseAdvertiseIP parses an advertise address given to memberlist, IPv4
// in its 4-byte form.
func parseAdvertiseIP(ip string) (net.IP, error) {
	a := net.ParseIP(ip)
	if a == nil {
		return nil, fmt.Errorf("failed to parse advertise address %q", ip)
	}
	if a4 := a.To4(); a4 != nil {
		a = a4
	}
	return a, nil
}

// FinalAdvertiseAddr is the address given, or else a private IP of this
// host when bound to 0.0.0.0, or else the address bound, with the port
// bound.
func (t *netTransport) FinalAdvertiseAddr(ip string, port int) (net.IP, int, error) {
	if ip != "" {
		a, err := parseAdvertiseIP(ip)
		return a, port, err
	}
	if !t.bindIP.Equal(net.IPv4zero) {
		return t.tcp.Addr().(*net.TCPAddr).IP, t.port(), nil
	}
	priv, err := sockaddr.GetPrivateIP()
	if err != nil {
		return nil, 0, fmt.Errorf("failed to get interface addresses: %w", err)
	}
	if priv == "" {
		return nil, 0, errors.New("no private IP address found, and explicit IP not provided")
	}
	a := net.ParseIP(priv)
	if a == nil {
		return nil, 0, fmt.Errorf("failed to parse advertise address %q", priv)
	}
	return a, t.port(), nil
}

func (t *netTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	return t.WriteToAddress(b, memberlist.Address{Addr: addr})
}

// WriteToAddress sends b in one UDP packet.
func (t *netTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	if ap, err := netip.ParseAddrPort(a.Addr); err == nil {
		_, err = t.udp.WriteToUDPAddrPort(b, ap)
		return time.Now(), err
	}
	ua, err := net.ResolveUDPAddr("udp", a.Addr)
	if err != nil {
		return time.Time{}, err
	}
	_, err = t.udp.WriteTo(b, ua)
	return time.Now(), err
}

func (t *netTransport) PacketCh() <-chan *memberlist.Packet { return t.packetCh }

func (t *netTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

func (t *netTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	return d.Dial("tcp", a.Addr)
}

func (t *netTransport) StreamCh() <-chan net.Conn { return t.streamCh }

// Shutdown closes both sockets and waits for their readers.
func (t *netTransport) Shutdown() error {
	t.shutdown.Store(true)
	_ = t.tcp.Close()
	_ = t.udp.Close()
	t.wg.Wait()
	return nil
}

// readPackets hands memberlist each UDP packet, in a slice of its own
// size, until Shutdown.
func (t *netTransport) readPackets() {
	defer t.wg.Done()
	buf := make([]byte, maxPacketSize)
	for {
		n, from, err := t.udp.ReadFromUDPAddrPort(buf)
		ts := time.Now()
		if err != nil {
			if t.shutdown.Load() {
				return
			}
			t.logger.Printf("[ERR] memberlist: Error reading UDP packet: %v", err)
			continue
		}
		if n < 1 {
			t.logger.Printf("[ERR] memberlist: UDP packet too short (%d bytes) %s", n, from)
			continue
		}
		gometrics.IncrCounterWithLabels([]string{"memberlist", "udp", "received"}, float32(n), nil)
		if deliver := t.userMsgs.Load(); deliver != nil {
			if msg, ok := plainUserMessage(buf[:n]); ok {
				(*deliver)(slices.Clone(msg))
				continue
			}
		}
		from = netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
		pkt := make([]byte, n)
		copy(pkt, buf)
		t.packetCh <- &memberlist.Packet{
			Buf:       pkt,
			From:      net.UDPAddrFromAddrPort(from),
			Timestamp: ts,
		}
	}
}

// deliverUserMessages hands the payload of every plain packet that holds
// one user message (memberlist's SendBestEffort, or sendUserPacket) to
// deliver, from the reading goroutine, instead of to memberlist. A user
// message is all memberlist would do with such a packet: pass it to its
// delegate's NotifyMsg, but only after two more goroutines (its packet
// listener, and its handler behind a last-in-first-out queue of at most
// HandoffQueueDepth messages, past which it drops them unseen). At a
// thousand changes a second across a hundred members that queue is where
// copies were lost and delayed. Only for a cluster that sends plain packets:
// with encryption or a label every packet goes to memberlist.
func (t *netTransport) deliverUserMessages(deliver func([]byte)) { t.userMsgs.Store(&deliver) }

// Bytes of memberlist's packet framing (memberlist v0.7.0, net.go): a
// message type byte, and a checksummed packet's header (hasCrcMsg and
// the CRC-32 of the rest).
const (
	memberlistUserMsg  = 8  // memberlist's userMsg
	memberlistHasCrc   = 12 // memberlist's hasCrcMsg
	memberlistCrcBytes = 5
)

// plainUserMessage returns the user message a plain packet holds: the
// payload after the userMsg byte, checksummed or not. A packet whose
// checksum does not match is not one (memberlist drops it, logged).
func plainUserMessage(b []byte) ([]byte, bool) {
	if len(b) >= memberlistCrcBytes && b[0] == memberlistHasCrc {
		if crc32.ChecksumIEEE(b[memberlistCrcBytes:]) != binary.BigEndian.Uint32(b[1:memberlistCrcBytes]) {
			return nil, false
		}
		b = b[memberlistCrcBytes:]
	}
	if len(b) < 2 || b[0] != memberlistUserMsg {
		return nil, false
	}
	return b[1:], true
}

// userPacket frames msg as memberlist's SendBestEffort does for a member
// that speaks protocol version 5 (checksummed): a packet any member reads
// as a user message, through memberlist or deliverUserMessages.
func userPacket(msg []byte) []byte {
	b := make([]byte, memberlistCrcBytes+1+len(msg))
	b[0] = memberlistHasCrc
	b[memberlistCrcBytes] = memberlistUserMsg
	copy(b[memberlistCrcBytes+1:], msg)
	binary.BigEndian.PutUint32(b[1:memberlistCrcBytes], crc32.ChecksumIEEE(b[memberlistCrcBytes:]))
	return b
}

// acceptStreams hands memberlist each TCP connection until Shutdown,
// backing off (5 ms doubling to 1 s) while accepting fails.
func (t *netTransport) acceptStreams() {
	defer t.wg.Done()
	const minDelay, maxDelay = 5 * time.Millisecond, time.Second
	var delay time.Duration
	for {
		c, err := t.tcp.AcceptTCP()
		if err != nil {
			if t.shutdown.Load() {
				return
			}
			delay = min(max(2*delay, minDelay), maxDelay)
			t.logger.Printf("[ERR] memberlist: Error accepting TCP connection: %v", err)
			time.Sleep(delay)
			continue
		}
		delay = 0
		t.streamCh <- c
	}
}
