package gossip

import (
	"bytes"
	"io"
	"log"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

func newTestTransport(t *testing.T) *netTransport {
	t.Helper()
	tr, err := newTransport("127.0.0.1", 0, log.New(io.Discard, "", 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Shutdown() })
	return tr
}

func (t *netTransport) addr() string { return "127.0.0.1:" + strconv.Itoa(t.port()) }

func nextPacket(t *testing.T, tr *netTransport) *memberlist.Packet {
	t.Helper()
	select {
	case p := <-tr.PacketCh():
		return p
	case <-time.After(5 * time.Second):
		t.Fatal("no packet")
		return nil
	}
}

// Each packet reaches memberlist in a slice of its own size that a later
// packet does not overwrite (the transport reads into one buffer), with
// the sender's address.
func TestTransportPacketsAreTheirOwn(t *testing.T) {
	a, b := newTestTransport(t), newTestTransport(t)
	first, second := []byte("first packet"), bytes.Repeat([]byte{'x'}, 1400)
	if _, err := a.WriteToAddress(first, memberlist.Address{Addr: b.addr()}); err != nil {
		t.Fatal(err)
	}
	p1 := nextPacket(t, b)
	if _, err := a.WriteTo(second, b.addr()); err != nil {
		t.Fatal(err)
	}
	p2 := nextPacket(t, b)
	if !bytes.Equal(p1.Buf, first) || cap(p1.Buf) != len(first) {
		t.Errorf("first packet = %q (cap %d), want %q in a slice of its size", p1.Buf, cap(p1.Buf), first)
	}
	if !bytes.Equal(p2.Buf, second) {
		t.Errorf("second packet: %d bytes, want the %d sent", len(p2.Buf), len(second))
	}
	if got := p1.From.String(); got != a.addr() {
		t.Errorf("packet from %s, want %s", got, a.addr())
	}
	if p1.Timestamp.IsZero() {
		t.Error("packet without a receive time")
	}
}

// A peer named by host name, not IP, is resolved.
func TestTransportWritesToHostNames(t *testing.T) {
	a, b := newTestTransport(t), newTestTransport(t)
	if _, err := a.WriteTo([]byte("hi"), "localhost:"+strconv.Itoa(b.port())); err != nil {
		t.Fatal(err)
	}
	if p := nextPacket(t, b); string(p.Buf) != "hi" {
		t.Fatalf("got %q", p.Buf)
	}
	if _, err := a.WriteTo([]byte("hi"), "no port"); err == nil {
		t.Fatal("a write to a malformed address succeeded")
	}
}

func TestTransportStreams(t *testing.T) {
	a, b := newTestTransport(t), newTestTransport(t)
	c, err := a.DialAddressTimeout(memberlist.Address{Addr: b.addr()}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("push/pull")); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-b.StreamCh():
		defer s.Close()
		buf := make([]byte, 9)
		if _, err := io.ReadFull(s, buf); err != nil || string(buf) != "push/pull" {
			t.Fatalf("stream read %q, %v", buf, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no stream")
	}
}

func TestTransportAdvertiseAddress(t *testing.T) {
	tr := newTestTransport(t)
	ip, port, err := tr.FinalAdvertiseAddr("", 0)
	if err != nil || !ip.Equal(net.IPv4(127, 0, 0, 1)) || port != tr.port() {
		t.Errorf("bound to 127.0.0.1: advertises %v:%d (%v), want 127.0.0.1:%d", ip, port, err, tr.port())
	}
	ip, port, err = tr.FinalAdvertiseAddr("10.1.2.3", 7946)
	if err != nil || ip.String() != "10.1.2.3" || len(ip) != net.IPv4len || port != 7946 {
		t.Errorf("given 10.1.2.3:7946: advertises %v:%d (%v)", ip, port, err)
	}
	if _, _, err := tr.FinalAdvertiseAddr("not an ip", 7946); err == nil {
		t.Error("a malformed advertise address was accepted")
	}
}

// A port in use is an error, not a transport on another port.
func TestTransportRefusesAPortInUse(t *testing.T) {
	tr := newTestTransport(t)
	if _, err := newTransport("127.0.0.1", tr.port(), log.New(io.Discard, "", 0)); err == nil {
		t.Fatal("a second transport bound the same port")
	}
	if _, err := newTransport("not an ip", 0, log.New(io.Discard, "", 0)); err == nil {
		t.Fatal("a malformed bind address was accepted")
	}
}

// Shutdown closes both sockets and returns.
func TestTransportShutdown(t *testing.T) {
	tr, err := newTransport("127.0.0.1", 0, log.New(io.Discard, "", 0))
	if err != nil {
		t.Fatal(err)
	}
	addr := tr.addr()
	done := make(chan error, 1)
	go func() { done <- tr.Shutdown() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Shutdown did not return")
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		_ = c.Close()
		t.Fatal("the TCP listener still accepts after Shutdown")
	}
}

// Bound to 0.0.0.0 (a dual-stack socket where the host has IPv6), the
// transport still reaches IPv4 peers and sees them as IPv4 addresses.
func TestTransportOnTheUnspecifiedAddress(t *testing.T) {
	a, err := newTransport("0.0.0.0", 0, log.New(io.Discard, "", 0))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Shutdown()
	b := newTestTransport(t)
	if _, err := a.WriteTo([]byte("ping"), b.addr()); err != nil {
		t.Fatal(err)
	}
	p := nextPacket(t, b)
	if string(p.Buf) != "ping" {
		t.Fatalf("got %q", p.Buf)
	}
	if _, err := b.WriteTo([]byte("ack"), p.From.String()); err != nil {
		t.Fatal(err)
	}
	if q := nextPacket(t, a); string(q.Buf) != "ack" || q.From.String() != b.addr() {
		t.Fatalf("got %q from %s, want \"ack\" from %s", q.Buf, q.From, b.addr())
	}
}

// A user message framed by userPacket is handed to the user-message
// receiver, not to memberlist; a packet memberlist must read (one of its
// own messages, or a user message whose checksum fails) still goes to
// memberlist.
func TestTransportDeliversUserMessagesDirectly(t *testing.T) {
	a, b := newTestTransport(t), newTestTransport(t)
	got := make(chan []byte, 4)
	b.deliverUserMessages(func(m []byte) { got <- m })
	if _, err := a.WriteToAddress(userPacket([]byte("delta batch")), memberlist.Address{Addr: b.addr()}); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-got:
		if string(m) != "delta batch" {
			t.Errorf("user message = %q, want %q", m, "delta batch")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("user message not delivered")
	}
	corrupt := userPacket([]byte("delta batch"))
	corrupt[len(corrupt)-1] ^= 1
	for _, p := range [][]byte{{0, 1, 2, 3}, corrupt} {
		if _, err := a.WriteToAddress(p, memberlist.Address{Addr: b.addr()}); err != nil {
			t.Fatal(err)
		}
		if pkt := nextPacket(t, b); !bytes.Equal(pkt.Buf, p) {
			t.Errorf("memberlist got %x, want %x", pkt.Buf, p)
		}
	}
	if len(got) != 0 {
		t.Errorf("%d packets that are not plain user messages were delivered as such", len(got))
	}
}

// plainUserMessage reads what userPacket frames, and memberlist's
// unchecksummed user packets; anything else is not a user message.
func TestPlainUserMessage(t *testing.T) {
	for _, tc := range []struct {
		packet []byte
		want   string
		ok     bool
	}{
		{userPacket([]byte("m")), "m", true},
		{[]byte{memberlistUserMsg, 'm'}, "m", true},
		{[]byte{memberlistUserMsg}, "", false},
		{[]byte{memberlistHasCrc, 0, 0, 0}, "", false},
		{[]byte{7, 'm'}, "", false},
		{nil, "", false},
	} {
		m, ok := plainUserMessage(tc.packet)
		if ok != tc.ok || string(m) != tc.want {
			t.Errorf("plainUserMessage(%x) = %q, %v; want %q, %v", tc.packet, m, ok, tc.want, tc.ok)
		}
	}
}

func FuzzPlainUserMessage(f *testing.F) {
	f.Add(userPacket([]byte("m")))
	f.Add([]byte{memberlistUserMsg, 'm'})
	f.Add([]byte{memberlistHasCrc, 1, 2, 3, 4, memberlistUserMsg})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, ok := plainUserMessage(b)
		if ok && (len(m) == 0 || !bytes.HasSuffix(b, m)) {
			t.Fatalf("plainUserMessage(%x) = %x: not a non-empty tail of the packet", b, m)
		}
		if ok {
			if back, ok := plainUserMessage(userPacket(m)); !ok || !bytes.Equal(back, m) {
				t.Fatalf("userPacket(%x) reads back as %x, %v", m, back, ok)
			}
		}
	})
}
