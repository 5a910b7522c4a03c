package node

import (
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// The event loop for plain TCP clients (docs/performance.md). A few poller
// goroutines (one per CPU) each wait on an epoll set of client sockets,
// level-triggered, for input. When one is readable its poller reads it once
// into the poller's own buffer and hands the complete lines to the shared
// protocol code (conn.consume, then handleLine) on that goroutine; only a
// partial line, or lines held back while the connection is paused
// (backpressure), are copied into the connection. So an idle connection
// owns no goroutine and no read buffer. Writes are made by whoever queues
// the frame, without blocking (conn.wakeWriter); a writer goroutine runs
// only while a socket does not take everything at once.
//
// The socket stays a *net.TCPConn. It is closed only by its poller
// (finishEvent, under conn.rmu), which removes it from the epoll set
// first; abort shuts it down instead, which wakes the poller. So the
// poller reads the descriptor directly under conn.rmu; writes and shutdown,
// made elsewhere, go through its syscall.RawConn, which holds the
// descriptor open while in use, so a descriptor closed and reused meanwhile
// is never written.

// readChunk is a poller's read buffer: one read per readiness event.
const readChunk = 64 << 10

// pollerSet is the node's pollers, assigned to connections in turn.
type pollerSet struct {
	ps   []*poller
	next atomic.Uint32
	wg   sync.WaitGroup
}

type poller struct {
	n    *Node
	epfd int
	wake int // an eventfd: written to stop the poller
	buf  []byte
	stop atomic.Bool

	mu    sync.Mutex
	conns []*conn // by slot; the epoll data names the slot and the conn id's low bits
	free  []uint32

	// The read in progress (the poller goroutine only).
	rn   int
	rerr error
}

// startPollers starts the event loop's pollers, or returns nil when the
// node serves clients with goroutines (Config.GoroutineIO).
func (n *Node) startPollers() (*pollerSet, error) {
	if n.cfg.GoroutineIO {
		return nil, nil
	}
	set := &pollerSet{}
	for range max(1, runtime.GOMAXPROCS(0)) {
		p, err := newPoller(n)
		if err != nil {
			set.close()
			return nil, err
		}
		set.ps = append(set.ps, p)
		set.wg.Add(1)
		go p.run(&set.wg)
	}
	return set, nil
}

func newPoller(n *Node) (*poller, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("node: epoll_create: %w", err)
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("node: eventfd: %w", err)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: -1}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wake, &ev); err != nil {
		unix.Close(epfd)
		unix.Close(wake)
		return nil, fmt.Errorf("node: epoll_ctl: %w", err)
	}
	p := &poller{n: n, epfd: epfd, wake: wake, buf: make([]byte, readChunk)}
	return p, nil
}

// close stops the pollers and waits for them. The caller has finished
// every connection first (Node.Close waits for connWG).
func (s *pollerSet) close() {
	if s == nil {
		return
	}
	for _, p := range s.ps {
		p.stop.Store(true)
		var one = [8]byte{1}
		unix.Write(p.wake, one[:]) //nolint:errcheck // an eventfd write of 1 does not fail
	}
	s.wg.Wait()
	for _, p := range s.ps {
		unix.Close(p.epfd)
		unix.Close(p.wake)
	}
}

// pollFor returns the poller to serve raw on, with raw's RawConn, or nil
// when raw is served by goroutines (not a TCP socket).
func (s *pollerSet) pollFor(raw net.Conn) (*poller, syscall.RawConn) {
	if s == nil {
		return nil, nil
	}
	tc, ok := raw.(*net.TCPConn)
	if !ok {
		return nil, nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil, nil
	}
	return s.ps[int(s.next.Add(1))%len(s.ps)], rc
}

func (p *poller) run(wg *sync.WaitGroup) {
	defer wg.Done()
	events := make([]unix.EpollEvent, 256)
	for {
		k, err := unix.EpollWait(p.epfd, events, -1)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			p.n.log.Error("epoll_wait failed; client connections on this poller stall", zap.Error(err))
			return
		}
		for i := range k {
			ev := &events[i]
			if ev.Fd < 0 {
				if p.stop.Load() {
					return
				}
				continue
			}
			if c := p.lookup(uint32(ev.Fd), uint32(ev.Pad)); c != nil {
				p.ready(c, ev.Events)
			}
		}
	}
}

func (p *poller) lookup(slot, gen uint32) *conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	if int(slot) >= len(p.conns) {
		return nil
	}
	c := p.conns[slot]
	if c == nil || uint32(c.id) != gen {
		return nil
	}
	return c
}

// add registers c, whose fields are all set: the lock orders them before
// the poller's first look at c.
func (p *poller) add(c *conn) error {
	p.mu.Lock()
	var slot uint32
	if k := len(p.free); k > 0 {
		slot = p.free[k-1]
		p.free = p.free[:k-1]
	} else {
		slot = uint32(len(p.conns))
		p.conns = append(p.conns, nil)
	}
	p.conns[slot] = c
	c.slot = slot
	p.mu.Unlock()
	var err error
	cerr := c.rc.Control(func(fd uintptr) {
		c.fd = int(fd)
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(slot), Pad: int32(uint32(c.id))}
		err = unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, c.fd, &ev)
	})
	if err = errors.Join(cerr, err); err != nil {
		p.remove(c)
		return fmt.Errorf("node: epoll_ctl add: %w", err)
	}
	return nil
}

func (p *poller) remove(c *conn) {
	p.mu.Lock()
	if p.conns[c.slot] == c {
		p.conns[c.slot] = nil
		p.free = append(p.free, c.slot)
	}
	p.mu.Unlock()
}

// setReading turns c's readiness events on or off (pause). The caller holds
// c.rmu and c is not finished, so the descriptor is open.
func (p *poller) setReading(c *conn, on bool) {
	ev := unix.EpollEvent{Fd: int32(c.slot), Pad: int32(uint32(c.id))}
	if on {
		ev.Events = unix.EPOLLIN
	}
	if err := unix.EpollCtl(p.epfd, unix.EPOLL_CTL_MOD, c.fd, &ev); err != nil {
		p.n.log.Debug("epoll_ctl mod failed", zap.Uint64("conn", c.id), zap.Error(err))
	}
}

// ready handles a readiness event of c: one read, then its lines.
func (p *poller) ready(c *conn, events uint32) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if c.finished {
		return
	}
	if c.paused {
		// Only a hangup or error is reported while paused.
		if events&(unix.EPOLLHUP|unix.EPOLLERR) != 0 {
			c.finishEvent()
		}
		return
	}
	// c.fd is open: only finishEvent closes it, under c.rmu.
	p.rn, p.rerr = unix.Read(c.fd, p.buf)
	switch {
	case p.rerr == nil && p.rn > 0:
		c.consume(p.buf[:p.rn])
	case errors.Is(p.rerr, unix.EAGAIN) || errors.Is(p.rerr, unix.EINTR):
	default:
		if p.rerr != nil && c.state.Load() != stateClosing && !errors.Is(p.rerr, unix.ECONNRESET) {
			p.n.log.Debug("read failed", zap.Uint64("conn", c.id), zap.Error(p.rerr))
		}
		c.finishEvent() // EOF or a read error
	}
}

// shutdown ends both directions of c's socket at once without closing the
// descriptor: a blocked writer fails, and c's poller sees the hangup and
// finishes c.
func (c *conn) shutdownSocket() {
	c.rc.Control(func(fd uintptr) { //nolint:errcheck // closed already: nothing to do
		unix.Shutdown(int(fd), unix.SHUT_RDWR) //nolint:errcheck // best effort
	})
}

func writev(fd int, iov [][]byte) (int, error) { return unix.Writev(fd, iov) }
