package node

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// The event loop for plain TCP clients (docs/performance.md). A few poller
// goroutines (one per CPU) each wait on an epoll set of client sockets,
// level-triggered. When one is readable its poller reads it once into the
// poller's own buffer and hands the complete lines to the shared protocol
// code (conn.consume, then handleLine) on that goroutine; only a partial
// line, or lines held back while the connection is paused (backpressure),
// are copied into the connection. So an idle connection owns no goroutine
// and no buffer. Frames are written by whoever queues them, without
// blocking (flushEvent); what the socket does not take waits for the
// poller to see room (EPOLLOUT), within the write timeout. A goroutine
// runs only to end the session of a closing connection (closeEvent, which
// takes the node's lock) and while a paused connection waits for room.
//
// The event loop owns its socket: a duplicate of the accepted one, whose
// net.Conn is closed so the runtime's own poller does not wake for it too.
// The descriptor is closed only by finishEvent, under conn.rmu and
// conn.wmu, after it leaves the epoll set: the poller reads it under rmu,
// everyone else writes or shuts it down under wmu, so a descriptor closed
// and reused meanwhile is never touched. abort shuts it down, which the
// poller sees as a hangup.

// readChunk is a poller's read buffer: one read per readiness event.
const readChunk = 64 << 10

// pollerYieldEvery is how often a poller yields to the scheduler: well
// under the 10 ms after which the runtime's monitor treats a goroutine as
// running too long (forcePreemptNS).
const pollerYieldEvery = 2 * time.Millisecond

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

	// writes counts the writev calls to this poller's sockets.
	writes atomic.Uint64

	// The io_uring mode (uring_linux.go): ring is nil in the epoll mode.
	// ops and sleeping are guarded by mu.
	ring     *ring
	ops      []uringOp
	sleeping bool
}

// startPollers starts the event loop's pollers, or returns nil when the
// node serves clients with goroutines (Config.GoroutineIO).
func (n *Node) startPollers() (*pollerSet, error) {
	if n.cfg.GoroutineIO {
		return nil, nil
	}
	set := &pollerSet{}
	k := n.cfg.Pollers
	if k <= 0 {
		k = runtime.GOMAXPROCS(0)
	}
	refused := false
	for range max(1, k) {
		p, err := newPoller(n)
		if err != nil {
			set.close()
			return nil, err
		}
		set.ps = append(set.ps, p)
		set.wg.Add(1)
		if !n.cfg.IOUring {
			go p.run(&set.wg)
			continue
		}
		started := make(chan error, 1)
		go func() {
			if err := p.startRing(); err != nil {
				started <- err
				p.run(&set.wg)
				return
			}
			started <- nil
			p.runUring(&set.wg)
		}()
		if err := <-started; err != nil && !refused {
			refused = true // the same for every poller: said once
			n.log.Warn("io_uring unavailable (the kernel, or a seccomp profile such as a container runtime's, refuses it); the event loop uses epoll (IOUring false, the agent's --io-uring=false, asks for epoll without this warning)", zap.Error(err))
		}
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
	return &poller{n: n, epfd: epfd, wake: wake, buf: make([]byte, readChunk)}, nil
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
		if p.ring != nil {
			p.ring.close()
		}
		unix.Close(p.epfd)
		unix.Close(p.wake)
	}
}

// pollFor returns the poller to serve raw on and the event loop's duplicate
// of its socket, or false when raw is served by goroutines (not a TCP
// socket, or no descriptor for the duplicate).
func (s *pollerSet) pollFor(raw net.Conn) (*poller, int, bool) {
	if s == nil {
		return nil, -1, false
	}
	tc, ok := raw.(*net.TCPConn)
	if !ok {
		return nil, -1, false
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil, -1, false
	}
	fd := -1
	cerr := rc.Control(func(sfd uintptr) {
		fd, err = unix.FcntlInt(sfd, unix.F_DUPFD_CLOEXEC, 0)
	})
	if cerr != nil || err != nil {
		p := s.ps[0]
		p.n.log.Debug("no event loop for a client connection; serving it with goroutines", zap.Error(errors.Join(cerr, err)))
		return nil, -1, false
	}
	return s.ps[int(s.next.Add(1))%len(s.ps)], fd, true
}

// run handles readiness events until the set closes, waiting in a
// blocking epoll_wait.
func (p *poller) run(wg *sync.WaitGroup) {
	defer wg.Done()
	events := make([]unix.EpollEvent, 256)
	yielded := time.Now()
	for {
		// A poller goroutine that never yields looks to the runtime's
		// monitor (sysmon) like one running too long: past 10 ms on one
		// scheduling tick it takes the poller's P away at every
		// epoll_wait, and then wakes every 20 µs for a while, a thread
		// switch each. Yielding now and then, far less often than every
		// round, starts a new tick.
		if now := time.Now(); now.Sub(yielded) >= pollerYieldEvery {
			runtime.Gosched()
			yielded = now
		}
		// A blocking epoll_wait holds this goroutine's thread while it
		// waits. Waiting through the runtime's poller instead (the epoll
		// descriptor is pollable) blocks no thread but pays a second
		// epoll_wait and a goroutine wakeup per round: 17% more CPU per
		// heartbeat at 10,000 sessions and 40,000 heartbeats/s
		// (docs/performance.md).
		k, werr := unix.EpollWait(p.epfd, events, -1)
		if werr != nil {
			if errors.Is(werr, unix.EINTR) {
				continue
			}
			p.n.log.Error("epoll_wait failed; client connections on this poller stall", zap.Error(werr))
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
	c.wmu.Lock()
	defer c.wmu.Unlock()
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(slot), Pad: int32(uint32(c.id))}
	if p.ring != nil {
		// Input comes from the ring; the epoll set reports a hangup.
		ev.Events = unix.EPOLLET
	}
	if err := unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, c.fd, &ev); err != nil {
		return fmt.Errorf("node: epoll_ctl add: %w", err)
	}
	if p.ring != nil {
		p.queueSync(c)
	}
	return nil
}

func (p *poller) remove(c *conn) {
	p.mu.Lock()
	if int(c.slot) < len(p.conns) && p.conns[c.slot] == c {
		p.conns[c.slot] = nil
		p.free = append(p.free, c.slot)
	}
	p.mu.Unlock()
}

// setReading turns c's read interest on or off (pause). The caller holds
// c.rmu.
func (p *poller) setReading(c *conn, on bool) {
	c.wmu.Lock()
	c.readOff = !on
	c.setInterestLocked()
	c.wmu.Unlock()
	if p.ring != nil {
		p.queueSync(c) // c.paused says what to do, under c.rmu
	}
}

// setInterestLocked tells the epoll set what c waits for: input unless
// paused, room while frames wait. The caller holds c.wmu.
func (c *conn) setInterestLocked() {
	if c.fd < 0 {
		return
	}
	ev := unix.EpollEvent{Fd: int32(c.slot), Pad: int32(uint32(c.id))}
	if c.poll.ring != nil {
		// Input comes from the ring (uring_linux.go), which sees the end
		// of input while it reads: the set reports room, edge-triggered,
		// and while c is paused, when the ring does not read, a hangup,
		// level-triggered (one that came before the pause is reported
		// now).
		if !c.readOff {
			ev.Events = unix.EPOLLET
		}
	} else if !c.readOff {
		ev.Events |= unix.EPOLLIN
	}
	if c.wantOut {
		ev.Events |= unix.EPOLLOUT
	}
	if err := unix.EpollCtl(c.poll.epfd, unix.EPOLL_CTL_MOD, c.fd, &ev); err != nil {
		c.n.log.Debug("epoll_ctl mod failed", zap.Uint64("conn", c.id), zap.Error(err))
	}
}

// ready handles a readiness event of c: frames waiting for room first,
// then one read and its lines.
func (p *poller) ready(c *conn, events uint32) {
	defer c.recoverAbort("poller")
	if events&(unix.EPOLLOUT|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
		c.flushEvent(true)
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if c.finished {
		return
	}
	if c.paused || p.ring != nil {
		// Input waits (or comes from the ring, which sees the end of
		// input); a hangup or error ends a paused c.
		if c.paused && events&(unix.EPOLLHUP|unix.EPOLLERR) != 0 {
			c.finishEvent()
		}
		return
	}
	if events&(unix.EPOLLIN|unix.EPOLLHUP|unix.EPOLLERR) == 0 {
		return
	}
	// c.fd is open: only finishEvent closes it, under c.rmu.
	p.rn, p.rerr = unix.Read(c.fd, p.buf)
	switch {
	case p.rerr == nil && p.rn > 0:
		c.consumeCorked(p.buf[:p.rn])
	case errors.Is(p.rerr, unix.EAGAIN) || errors.Is(p.rerr, unix.EINTR):
	default:
		if p.rerr != nil && c.state.Load() != stateClosing && !errors.Is(p.rerr, unix.ECONNRESET) {
			p.n.log.Debug("read failed", zap.Uint64("conn", c.id), zap.Error(p.rerr))
		}
		c.finishEvent() // EOF or a read error
	}
}

// consumeCorked is consume with c's queue corked: the replies to the lines
// of one read, and whatever else is queued meanwhile, are written together
// once the lines are handled, in one writev. The caller holds c.rmu.
func (c *conn) consumeCorked(data []byte) {
	q := &c.q
	q.mu.Lock()
	q.corked = true
	q.mu.Unlock()
	defer c.uncork()
	c.consume(data)
}

// uncork ends consumeCorked: it writes what was queued meanwhile.
func (c *conn) uncork() {
	q := &c.q
	q.mu.Lock()
	q.corked = false
	due := q.flushDue
	q.flushDue = false
	q.mu.Unlock()
	if due {
		c.flushEvent(false)
	}
}

// flushCorked writes what waits in c's corked queue now, and reports
// whether there was any; the queue stays corked. The caller holds c.rmu.
func (c *conn) flushCorked() bool {
	q := &c.q
	q.mu.Lock()
	due := q.flushDue
	q.flushDue = false
	q.mu.Unlock()
	if due {
		c.flushEvent(false)
	}
	return due
}

// pause stops reading c until room is closed (roomWait): the poller never
// blocks on one connection's backpressure. A goroutine waits meanwhile and
// then handles the input held and turns reading back on. The caller holds
// c.rmu.
func (c *conn) pause(room <-chan struct{}) {
	c.paused = true
	c.poll.setReading(c, false)
	c.n.connWG.Add(1) // c is not finished: its reader side holds connWG
	go func() {
		defer c.n.connWG.Done()
		defer c.recoverAbort("paused reader")
		<-room
		c.rmu.Lock()
		defer c.rmu.Unlock()
		if c.finished {
			return
		}
		c.paused = false
		if room := c.sendSnapshotPages(); room != nil {
			c.pause(room) // the next page, or the room to read on, once the writer drains this one
			return
		}
		c.consumeCorked(nil)
		if !c.paused && !c.finished {
			c.poll.setReading(c, true)
		}
	}()
}

// finishEvent is finish on the event loop: the session, if still live, is
// disconnected at once, the socket closed and c forgotten. The caller holds
// c.rmu.
func (c *conn) finishEvent() {
	if c.finished {
		return
	}
	c.finished = true
	c.in = nil
	if c.hsTimer != nil {
		c.hsTimer.Stop()
		c.hsTimer = nil
	}
	c.poll.remove(c)
	c.poll.cancelRecvLocked(c)
	c.n.connLost(c)
	c.markDead()
	c.wmu.Lock()
	c.stopWaitLocked()
	c.pend, c.batch = nil, nil
	if c.fd >= 0 {
		unix.EpollCtl(c.poll.epfd, unix.EPOLL_CTL_DEL, c.fd, nil) //nolint:errcheck // closing removes it anyway
		unix.Close(c.fd)                                          //nolint:errcheck // nothing to do
		c.fd = -1
	}
	c.wmu.Unlock()
	c.n.connWG.Done()
}

// shutdownEvent is abort on the event loop: both directions of the socket
// end at once, without closing the descriptor; the poller sees the hangup
// and finishes c.
func (c *conn) shutdownEvent() {
	c.wmu.Lock()
	if c.fd >= 0 {
		unix.Shutdown(c.fd, unix.SHUT_RDWR) //nolint:errcheck // best effort
	}
	c.wmu.Unlock()
	if c.poll.ring != nil {
		c.poll.queueSync(c) // cancel its receive and finish it
	}
}

// writeSoonEvent shortens the write timeout of frames waiting for room to
// a second (a slow consumer's queue was replaced by its error line).
func (c *conn) writeSoonEvent() {
	c.wmu.Lock()
	if c.wtimer != nil {
		c.wtimer.Reset(time.Second)
	}
	c.wmu.Unlock()
}

// flushEvent writes the queue without blocking: by a producer that set
// q.writing (wakeWriter), or by the poller when frames wait for room
// (fromPoller).
func (c *conn) flushEvent(fromPoller bool) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if fromPoller && !c.wantOut {
		return
	}
	c.flushLocked()
}

// flushLocked writes pending frames and then the queue while the socket
// takes them; what it does not take waits for room (EPOLLOUT) within the
// write timeout. q.writing stays set until the queue is empty, and for good
// once the connection closes. The caller holds c.wmu and q.writing.
func (c *conn) flushLocked() {
	q := &c.q
	for {
		if len(c.pend) == 0 {
			frames, closing, dead := q.take()
			if dead {
				c.stopWaitLocked()
				return
			}
			if closing && !c.closed {
				// Ending the session takes the node's lock: on a
				// goroutine, as the caller may hold it.
				c.stopWaitLocked()
				q.mu.Lock()
				if !q.dead {
					c.n.connWG.Add(1) // not dead: c's reader side holds connWG
					go c.closeEvent(frames)
				}
				q.mu.Unlock()
				return
			}
			c.pend, c.batch = frames, frames
		}
		if len(c.pend) > 0 {
			rest, err := c.writeNowLocked(c.pend)
			if err != nil {
				if !errors.Is(err, unix.EPIPE) && !errors.Is(err, unix.ECONNRESET) && !errors.Is(err, net.ErrClosed) {
					c.n.log.Debug("write failed", zap.Uint64("conn", c.id), zap.Error(err))
				}
				c.pend, c.batch = nil, nil
				c.stopWaitLocked()
				c.markDead()
				if c.fd >= 0 {
					unix.Shutdown(c.fd, unix.SHUT_RDWR) //nolint:errcheck // best effort
				}
				return
			}
			c.pend = rest
			if len(rest) > 0 {
				c.waitRoomLocked()
				return
			}
			c.stopWaitLocked()
			q.recycle(c.batch)
			c.pend, c.batch = nil, nil
		}
		if c.closed {
			// Everything queued is written (frames queued after take
			// would have been refused). Half-close so the final line
			// arrives; the poller reads until the client closes or the
			// linger passes.
			q.mu.Lock()
			pending := len(q.frames) > 0
			q.mu.Unlock()
			if pending {
				continue
			}
			if c.fd >= 0 {
				unix.Shutdown(c.fd, unix.SHUT_WR) //nolint:errcheck // a failure shows up as a hangup
			}
			time.AfterFunc(lingerTimeout, c.abort)
			return
		}
		if q.doneWriting() {
			return
		}
	}
}

// closeEvent ends the session of a closing connection, as writeLoop does,
// then writes its final frames (those already taken first). The caller
// added 1 to connWG.
func (c *conn) closeEvent(frames [][]byte) {
	defer c.n.connWG.Done()
	defer c.recoverAbort("closer")
	c.n.endConnSession(c, false)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.closed = true
	c.pend, c.batch = frames, frames
	c.flushLocked()
}

// waitRoomLocked has the poller flush c.pend when the socket has room, and
// arms the write timeout: WriteTimeout per OutboundQueueBytes pending (a
// final frame: the linger at most). The caller holds c.wmu.
func (c *conn) waitRoomLocked() {
	if !c.wantOut {
		c.wantOut = true
		c.setInterestLocked()
	}
	if c.wtimer != nil {
		return
	}
	timeout := c.n.cfg.WriteTimeout
	if c.closed {
		timeout = min(timeout, lingerTimeout) // a final frame is best effort
	} else {
		size := 0
		for _, f := range c.pend {
			size += len(f)
		}
		timeout *= time.Duration(1 + size/max(c.n.cfg.OutboundQueueBytes, 1))
	}
	c.wgen++
	gen := c.wgen
	c.wtimer = time.AfterFunc(timeout, func() { c.writeTimedOut(gen) })
}

// stopWaitLocked ends a wait for room. The caller holds c.wmu.
func (c *conn) stopWaitLocked() {
	if c.wantOut {
		c.wantOut = false
		c.setInterestLocked()
	}
	if c.wtimer != nil {
		c.wtimer.Stop()
		c.wtimer = nil
		c.wgen++
	}
}

// writeTimedOut drops a client whose socket took nothing of a batch within
// its write timeout, as writeLoop's deadline does.
func (c *conn) writeTimedOut(gen uint64) {
	c.wmu.Lock()
	stale := c.wgen != gen || c.wtimer == nil
	c.wmu.Unlock()
	if stale {
		return
	}
	c.writeFailed(os.ErrDeadlineExceeded)
}

// writeNowLocked writes frames with non-blocking writes while the socket
// takes them, and returns what it did not take (its first frame cut where
// the socket stopped). The caller holds c.wmu.
func (c *conn) writeNowLocked(frames [][]byte) ([][]byte, error) {
	for len(frames) > 0 {
		if c.fd < 0 {
			return frames, net.ErrClosed
		}
		iov := frames[:min(len(frames), 1024)] // IOV_MAX
		k, err := unix.Writev(c.fd, iov)
		c.poll.writes.Add(1)
		if err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				return frames, nil
			}
			return frames, err
		}
		size := 0
		for _, f := range iov {
			size += len(f)
		}
		full := k < size
		for k > 0 {
			if k < len(frames[0]) {
				frames[0] = frames[0][k:]
				break
			}
			k -= len(frames[0])
			frames = frames[1:]
		}
		if full {
			return frames, nil // the socket's buffer is full
		}
	}
	return frames, nil
}
