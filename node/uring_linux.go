package node

import (
	"errors"
	"runtime"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// The event loop's io_uring mode (Config.IOUring, docs/performance.md).
// Each poller owns an io_uring instead of waiting in epoll_wait: every
// connection it serves has one multishot receive in the ring, which the
// kernel completes into a buffer taken from the poller's shared pool of
// provided buffers whenever input arrives. One io_uring_enter per round
// submits what changed and waits; the kernel runs the receives that became
// ready inside it, so a round costs one system call for every connection
// that sent something, where epoll costs an epoll_wait plus a read each.
//
// Everything but reading stays as in the epoll mode: frames are written by
// whoever queues them, and the epoll set (its descriptor watched by a
// multishot poll in the ring) reports room to write while frames wait, and
// the hangup of a paused connection, edge-triggered. A paused connection's
// receive is cancelled and armed again when it resumes; input completed
// before the cancellation is held in the connection, as on a pause in the
// epoll mode.
//
// The ring is set up single-issuer with deferred task running, so the
// poller goroutine is locked to its thread; other goroutines ask it to arm
// or cancel a receive through p.ops and wake it with its eventfd.

const (
	uringBatchMax = 256 // completions a batch window waits for at most
	uringSQSize   = 1024
	uringCQSize   = 8192
	uringBufCount = 1024 // a power of two
	uringBufSize  = 4096
)

// The kinds of request in the ring, in the top bits of the user data.
const (
	udRecv   = 1
	udEpoll  = 2
	udWake   = 3
	udCancel = 0
)

// recvUD is the user data of c's receive number seq: kind, seq (14 bits),
// slot (24 bits) and the low 24 bits of c's id.
func recvUD(c *conn, seq uint16) uint64 {
	return udRecv<<62 | uint64(seq&0x3fff)<<48 | uint64(c.slot&0xffffff)<<24 | c.id&0xffffff
}

// uringOp asks the poller to bring c's receive in line with c's state.
type uringOp struct {
	c      *conn
	cancel uint64 // or cancel this receive (of a finished connection)
}

// startRing sets up p's ring on the calling goroutine, which it locks to
// its thread for good: only that thread may submit to the ring.
func (p *poller) startRing() error {
	runtime.LockOSThread()
	r, err := newRing(uringSQSize, uringCQSize, uringBufCount, uringBufSize)
	if err != nil {
		return err
	}
	p.ring = r
	p.buf = nil
	return nil
}

// queueSync asks the poller to arm or cancel c's receive as c's state
// wants (reading unless paused or finished).
func (p *poller) queueSync(c *conn) { p.queueOp(uringOp{c: c}) }

func (p *poller) queueOp(op uringOp) {
	p.mu.Lock()
	p.ops = append(p.ops, op)
	wake := p.sleeping
	p.mu.Unlock()
	if wake {
		var one = [8]byte{1}
		unix.Write(p.wake, one[:]) //nolint:errcheck // an eventfd write of 1 does not fail
	}
}

// runUring is run with a ring: it handles completions until the set
// closes. The goroutine is the one startRing locked.
func (p *poller) runUring(wg *sync.WaitGroup) {
	defer wg.Done()
	r := p.ring
	events := make([]unix.EpollEvent, 256)
	p.armPoll(p.epfd, udEpoll<<62)
	p.armPoll(p.wake, udWake<<62)
	yielded := time.Now()
	var ops []uringOp
	batch := false
	for {
		if now := time.Now(); now.Sub(yielded) >= pollerYieldEvery {
			runtime.Gosched()
			yielded = now
		}
		p.mu.Lock()
		p.sleeping = true
		ops, p.ops = p.ops, ops[:0]
		p.mu.Unlock()
		for i := range ops {
			p.doOp(ops[i])
			ops[i] = uringOp{}
		}
		var err error
		if batch && p.n.cfg.IOUringBatch > 0 {
			err = r.enterBatch(uringBatchMax, p.n.cfg.IOUringBatch)
		} else {
			err = r.enter(true)
		}
		p.mu.Lock()
		p.sleeping = false
		p.mu.Unlock()
		if err != nil && !errors.Is(err, unix.EINTR) && !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EBUSY) && !errors.Is(err, unix.ETIME) {
			p.n.log.Error("io_uring_enter failed; client connections on this poller stall", zap.Error(err))
			return
		}
		head, tail := r.cqReady()
		// A round that found input waits for more next time, up to the
		// batch window; one that found none (the window passed idle)
		// waits without a bound for the next.
		batch = head != tail
		for ; head != tail; head++ {
			cqe := *r.cqe(head)
			switch cqe.userData >> 62 {
			case udRecv:
				p.recvDone(cqe)
			case udEpoll:
				for {
					k, werr := unix.EpollWait(p.epfd, events, 0)
					if werr != nil && !errors.Is(werr, unix.EINTR) {
						p.n.log.Error("epoll_wait failed", zap.Error(werr))
						break
					}
					for i := range k {
						ev := &events[i]
						if c := p.lookup(uint32(ev.Fd), uint32(ev.Pad)); c != nil {
							p.ready(c, ev.Events)
						}
					}
					if k < len(events) {
						break
					}
				}
				if cqe.flags&uringCqeFMore == 0 {
					p.armPoll(p.epfd, udEpoll<<62)
				}
			case udWake:
				var b [8]byte
				unix.Read(p.wake, b[:]) //nolint:errcheck // EAGAIN: already read
				if p.stop.Load() {
					r.cqAdvance(head + 1)
					return
				}
				if cqe.flags&uringCqeFMore == 0 {
					p.armPoll(p.wake, udWake<<62)
				}
			}
			r.cqAdvance(head + 1)
		}
		r.publishBufs()
	}
}

// sqe returns a free submission entry, submitting the queue first when it
// is full.
func (p *poller) sqe() *uringSQE {
	for {
		if s := p.ring.getSQE(); s != nil {
			return s
		}
		if err := p.ring.enter(false); err != nil && !errors.Is(err, unix.EINTR) && !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EBUSY) {
			p.n.log.Error("io_uring_enter failed", zap.Error(err))
		}
	}
}

// armPoll watches fd for input with a multishot poll.
func (p *poller) armPoll(fd int, ud uint64) {
	s := p.sqe()
	s.opcode = uringOpPollAdd
	s.fd = int32(fd)
	s.len = uringPollAddMulti
	s.opFlags = unix.POLLIN
	s.userData = ud
}

// doOp carries out a request of p.ops.
func (p *poller) doOp(op uringOp) {
	if op.c == nil {
		s := p.sqe()
		s.opcode = uringOpAsyncCancel
		s.fd = -1
		s.addr = op.cancel
		s.userData = udCancel << 62
		return
	}
	c := op.c
	c.rmu.Lock()
	p.syncRecvLocked(c)
	c.rmu.Unlock()
}

// syncRecvLocked arms c's receive when c reads and has none, or cancels it
// when c is paused. A receive being cancelled is armed again once its last
// completion arrives (recvDone). The caller holds c.rmu, on the poller.
func (p *poller) syncRecvLocked(c *conn) {
	if c.finished {
		return
	}
	c.q.mu.Lock()
	dead := c.q.dead
	c.q.mu.Unlock()
	if dead && !c.rlive {
		c.finishEvent() // aborted: its receive is over
		return
	}
	want := !c.paused && !dead
	switch {
	case want && !c.rlive:
		c.rseq++
		c.rlive, c.rcancel = true, false
		s := p.sqe()
		s.opcode = uringOpRecv
		s.flags = uringSqeBufferSelect
		s.ioprio = uringRecvMultishot
		s.fd = int32(c.fd) // open: only finishEvent closes it, under c.rmu
		s.userData = recvUD(c, c.rseq)
	case !want && c.rlive && !c.rcancel:
		c.rcancel = true
		s := p.sqe()
		s.opcode = uringOpAsyncCancel
		s.fd = -1
		s.addr = recvUD(c, c.rseq)
		s.userData = udCancel << 62
	}
}

// recvDone handles a completion of a connection's receive: input, the
// end of input, or the end of the receive.
func (p *poller) recvDone(cqe uringCQE) {
	r := p.ring
	var data []byte
	if cqe.flags&uringCqeFBuffer != 0 {
		bid := uint16(cqe.flags >> uringCqeBufferShift)
		defer r.putBuf(bid)
		if cqe.res > 0 {
			data = r.buf(bid)[:cqe.res]
		}
	}
	ud := cqe.userData
	c := p.lookupID(uint32(ud>>24)&0xffffff, ud&0xffffff)
	if c == nil {
		return
	}
	p.recvConn(c, cqe, uint16(ud>>48)&0x3fff, data)
}

func (p *poller) recvConn(c *conn, cqe uringCQE, seq uint16, data []byte) {
	defer c.recoverAbort("poller")
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if c.finished {
		return
	}
	current := seq == c.rseq&0x3fff && c.rlive
	ended := cqe.flags&uringCqeFMore == 0
	switch {
	case cqe.res > 0:
		if c.paused {
			c.hold(data) // completed before the pause cancelled the receive
		} else {
			c.consumeCorked(data)
		}
	case cqe.res == 0:
		c.finishEvent() // EOF
		return
	default:
		switch errno := syscall.Errno(-cqe.res); errno {
		case unix.ENOBUFS, unix.ECANCELED, unix.EINTR, unix.EAGAIN, unix.ENOENT:
			// The receive ended without input: armed again below.
		default:
			if current {
				if c.state.Load() != stateClosing && errno != unix.ECONNRESET {
					p.n.log.Debug("read failed", zap.Uint64("conn", c.id), zap.Error(errno))
				}
				c.finishEvent()
				return
			}
		}
	}
	if ended && current && !c.finished {
		c.rlive, c.rcancel = false, false
		p.syncRecvLocked(c)
	}
}

// lookupID is lookup by the low 24 bits of the connection's id.
func (p *poller) lookupID(slot uint32, id24 uint64) *conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	if int(slot) >= len(p.conns) {
		return nil
	}
	c := p.conns[slot]
	if c == nil || c.id&0xffffff != id24 {
		return nil
	}
	return c
}

// cancelRecvLocked cancels c's receive as c finishes: the ring holds the
// socket open until it ends. The caller holds c.rmu.
func (p *poller) cancelRecvLocked(c *conn) {
	if p.ring == nil || !c.rlive || c.rcancel {
		return
	}
	c.rcancel = true
	p.queueOp(uringOp{cancel: recvUD(c, c.rseq)})
}
