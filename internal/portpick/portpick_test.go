package portpick

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// Ports held at once are distinct, bindable, and outside the range the
// kernel hands out for port 0.
func TestLoopbackPortsAreDistinctAndOutsideTheEphemeralRange(t *testing.T) {
	lo, hi := portRange()
	if lo == hi {
		t.Skip("no room below this machine's ephemeral range")
	}
	seen := map[string]bool{}
	for range 50 {
		p, err := Loopback(true)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Release()
		if seen[p.Addr] {
			t.Fatalf("%s handed out twice while held", p.Addr)
		}
		seen[p.Addr] = true
		_, ps, _ := net.SplitHostPort(p.Addr)
		port, _ := strconv.Atoi(ps)
		if port < lo || port >= hi {
			t.Fatalf("port %d outside [%d, %d)", port, lo, hi)
		}
		ln, err := net.Listen("tcp", p.Addr)
		if err != nil {
			t.Fatalf("held port not bindable: %v", err)
		}
		ln.Close()
	}
}

// A held port's lock keeps another picker (another test binary) off it
// until it is released.
func TestHeldPortIsLockedUntilReleased(t *testing.T) {
	if lo, hi := portRange(); lo == hi {
		t.Skip("no room below this machine's ephemeral range")
	}
	p, err := Loopback(false)
	if err != nil {
		t.Fatal(err)
	}
	_, ps, _ := net.SplitHostPort(p.Addr)
	path := filepath.Join(os.TempDir(), "rollcall-ports", ps)
	if f, err := tryLock(path); err == nil {
		unlock(f)
		t.Fatal("a second picker locked a held port")
	}
	p.Release()
	f, err := tryLock(path)
	if err != nil {
		t.Fatalf("released port still locked: %v", err)
	}
	unlock(f)
}
