package node

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The io_uring system interface the event loop's io_uring mode uses
// (uring_linux.go): one ring per poller, its submission and completion
// queues mapped into the process, and a ring of provided buffers that
// multishot receives fill. Raw system calls, no cgo. The layouts are the
// kernel's (include/uapi/linux/io_uring.h).

const (
	uringSetupCQSize        = 1 << 3
	uringSetupSubmitAll     = 1 << 7
	uringSetupCoopTaskrun   = 1 << 8
	uringSetupSingleIssuer  = 1 << 12
	uringSetupDeferTaskrun  = 1 << 13
	uringFeatSingleMmap     = 1 << 0
	uringFeatNoDrop         = 1 << 1
	uringEnterGetEvents     = 1 << 0
	uringEnterExtArg        = 1 << 3
	uringFeatExtArg         = 1 << 8
	uringOffSQRing          = 0
	uringOffCQRing          = 0x8000000
	uringOffSQEs            = 0x10000000
	uringRegisterPbufRing   = 22
	uringOpPollAdd          = 6
	uringOpAsyncCancel      = 14
	uringOpRead             = 22
	uringOpRecv             = 27
	uringSqeBufferSelect    = 1 << 5
	uringRecvMultishot      = 1 << 1
	uringPollAddMulti       = 1 << 0
	uringCqeFBuffer         = 1 << 0
	uringCqeFMore           = 1 << 1
	uringCqeBufferShift     = 16
	uringSqeSize            = 64
	uringCqeSize            = 16
	uringBufRingEntrySize   = 16
	uringBufRingTailOffset  = 14
	uringBufRingFirstBidOff = 12
)

type uringSQOffsets struct {
	head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
	userAddr                                                        uint64
}

type uringCQOffsets struct {
	head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
	userAddr                                                        uint64
}

type uringParams struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFd uint32
	resv                                                                   [3]uint32
	sqOff                                                                  uringSQOffsets
	cqOff                                                                  uringCQOffsets
}

type uringBufReg struct {
	ringAddr    uint64
	ringEntries uint32
	bgid        uint16
	flags       uint16
	resv        [3]uint64
}

// uringSQE is a submission queue entry.
type uringSQE struct {
	opcode      uint8
	flags       uint8
	ioprio      uint16
	fd          int32
	off         uint64
	addr        uint64
	len         uint32
	opFlags     uint32
	userData    uint64
	bufIndex    uint16
	personality uint16
	spliceFdIn  int32
	addr3       uint64
	pad         uint64
}

// uringCQE is a completion queue entry.
type uringCQE struct {
	userData uint64
	res      int32
	flags    uint32
}

// ring is one io_uring instance and its provided buffers. Only the
// goroutine that created it (locked to its thread) submits to it.
type ring struct {
	fd      int
	ringMem []byte // the submission and completion rings (one mapping)
	sqeMem  []byte

	sqHead, sqTail *uint32
	sqMask         uint32
	sqEntries      uint32
	sqArray        unsafe.Pointer
	sqes           unsafe.Pointer
	sqLocal        uint32 // the tail not yet published

	cqHead, cqTail *uint32
	cqMask         uint32
	cqes           unsafe.Pointer

	// The provided buffers (group 0): bufs holds bufCount buffers of
	// bufSize bytes; bufRing is the ring the kernel takes them from.
	bufMem   []byte
	bufRing  []byte
	bufSize  int
	bufCount int
	bufTail  uint16

	// The bounded wait (enterBatch): its argument and timeout.
	extArg bool
	waitTS unix.Timespec
	waitEA uringGeteventsArg
}

type uringGeteventsArg struct {
	sigmask     uint64
	sigmaskSz   uint32
	minWaitUsec uint32
	ts          uint64
}

func (r *ring) u32(off uint32) *uint32 { return (*uint32)(unsafe.Pointer(&r.ringMem[off])) }

// newRing sets up a ring of sqSize submission and cqSize completion
// entries, with bufCount provided buffers of bufSize bytes. It returns an
// error when the kernel lacks what the event loop needs (or refuses
// io_uring altogether).
func newRing(sqSize, cqSize uint32, bufCount, bufSize int) (*ring, error) {
	var p uringParams
	flags := uint32(uringSetupCQSize | uringSetupSubmitAll | uringSetupSingleIssuer | uringSetupDeferTaskrun)
	p.flags, p.cqEntries = flags, cqSize
	fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(sqSize), uintptr(unsafe.Pointer(&p)), 0)
	if errno == unix.EINVAL {
		// An older kernel: without deferred task running.
		p = uringParams{flags: uringSetupCQSize | uringSetupCoopTaskrun, cqEntries: cqSize}
		fd, _, errno = unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(sqSize), uintptr(unsafe.Pointer(&p)), 0)
	}
	if errno != 0 {
		return nil, fmt.Errorf("io_uring_setup: %w", errno)
	}
	r := &ring{fd: int(fd), extArg: p.features&uringFeatExtArg != 0}
	if p.features&uringFeatSingleMmap == 0 || p.features&uringFeatNoDrop == 0 {
		r.close()
		return nil, errors.New("io_uring: kernel too old (no single mmap or no CQ overflow keeping)")
	}
	sqLen := p.sqOff.array + p.sqEntries*4
	cqLen := p.cqOff.cqes + p.cqEntries*uringCqeSize
	size := max(sqLen, cqLen)
	mem, err := unix.Mmap(r.fd, uringOffSQRing, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		r.close()
		return nil, fmt.Errorf("io_uring mmap: %w", err)
	}
	r.ringMem = mem
	sqes, err := unix.Mmap(r.fd, uringOffSQEs, int(p.sqEntries*uringSqeSize), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		r.close()
		return nil, fmt.Errorf("io_uring mmap: %w", err)
	}
	r.sqeMem = sqes
	r.sqHead, r.sqTail = r.u32(p.sqOff.head), r.u32(p.sqOff.tail)
	r.sqMask, r.sqEntries = *r.u32(p.sqOff.ringMask), *r.u32(p.sqOff.ringEntries)
	r.sqArray = unsafe.Pointer(&mem[p.sqOff.array])
	r.sqes = unsafe.Pointer(&sqes[0])
	r.sqLocal = atomic.LoadUint32(r.sqTail)
	r.cqHead, r.cqTail = r.u32(p.cqOff.head), r.u32(p.cqOff.tail)
	r.cqMask = *r.u32(p.cqOff.ringMask)
	r.cqes = unsafe.Pointer(&mem[p.cqOff.cqes])
	for i := range r.sqEntries {
		*(*uint32)(unsafe.Add(r.sqArray, 4*i)) = i
	}
	if err := r.setupBuffers(bufCount, bufSize); err != nil {
		r.close()
		return nil, err
	}
	return r, nil
}

// setupBuffers registers the provided buffer ring (group 0) and fills it.
func (r *ring) setupBuffers(count, size int) error {
	rb, err := unix.Mmap(-1, 0, count*uringBufRingEntrySize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return fmt.Errorf("io_uring buffer ring: %w", err)
	}
	r.bufRing = rb
	bufs, err := unix.Mmap(-1, 0, count*size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return fmt.Errorf("io_uring buffers: %w", err)
	}
	r.bufMem, r.bufSize, r.bufCount = bufs, size, count
	reg := uringBufReg{ringAddr: uint64(uintptr(unsafe.Pointer(&rb[0]))), ringEntries: uint32(count)}
	_, _, errno := unix.Syscall6(unix.SYS_IO_URING_REGISTER, uintptr(r.fd), uringRegisterPbufRing, uintptr(unsafe.Pointer(&reg)), 1, 0, 0)
	if errno != 0 {
		return fmt.Errorf("io_uring provided buffer ring: %w", errno)
	}
	for i := range count {
		r.putBuf(uint16(i))
	}
	r.publishBufs()
	return nil
}

// buf returns provided buffer bid.
func (r *ring) buf(bid uint16) []byte {
	off := int(bid) * r.bufSize
	return r.bufMem[off : off+r.bufSize : off+r.bufSize]
}

// putBuf hands buffer bid back to the kernel, once published.
func (r *ring) putBuf(bid uint16) {
	idx := int(r.bufTail) & (r.bufCount - 1)
	e := unsafe.Pointer(&r.bufRing[idx*uringBufRingEntrySize])
	*(*uint64)(e) = uint64(uintptr(unsafe.Pointer(&r.bufMem[int(bid)*r.bufSize])))
	*(*uint32)(unsafe.Add(e, 8)) = uint32(r.bufSize)
	*(*uint16)(unsafe.Add(e, 12)) = bid
	r.bufTail++
}

// publishBufs makes the buffers put back visible to the kernel: the tail
// shares a 32-bit word with the first entry's buffer id, stored together.
func (r *ring) publishBufs() {
	w := (*uint32)(unsafe.Pointer(&r.bufRing[uringBufRingFirstBidOff]))
	bid0 := *(*uint16)(unsafe.Pointer(&r.bufRing[uringBufRingFirstBidOff]))
	atomic.StoreUint32(w, uint32(bid0)|uint32(r.bufTail)<<16)
}

// getSQE returns a free submission entry, zeroed, or nil when the queue is
// full (submit first).
func (r *ring) getSQE() *uringSQE {
	head := atomic.LoadUint32(r.sqHead)
	if r.sqLocal-head >= r.sqEntries {
		return nil
	}
	sqe := (*uringSQE)(unsafe.Add(r.sqes, uintptr(r.sqLocal&r.sqMask)*uringSqeSize))
	*sqe = uringSQE{}
	r.sqLocal++
	return sqe
}

// enter publishes the queued submissions and submits them, waiting for at
// least one completion when wait is set.
func (r *ring) enter(wait bool) error {
	atomic.StoreUint32(r.sqTail, r.sqLocal)
	toSubmit := r.sqLocal - atomic.LoadUint32(r.sqHead)
	var flags, minComplete uintptr
	if wait {
		flags, minComplete = uringEnterGetEvents, 1
	} else if toSubmit == 0 {
		return nil
	}
	_, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(toSubmit), minComplete, flags, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// enterBatch publishes and submits the queued submissions and waits for
// minComplete completions, or for timeout once one has arrived (ETIME
// when the timeout passes first, with fewer). Without the kernel's
// extended argument it waits for one completion.
func (r *ring) enterBatch(minComplete uint32, timeout time.Duration) error {
	if !r.extArg {
		return r.enter(true)
	}
	atomic.StoreUint32(r.sqTail, r.sqLocal)
	toSubmit := r.sqLocal - atomic.LoadUint32(r.sqHead)
	r.waitTS = unix.NsecToTimespec(int64(timeout))
	r.waitEA = uringGeteventsArg{ts: uint64(uintptr(unsafe.Pointer(&r.waitTS)))}
	_, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(toSubmit), uintptr(minComplete),
		uringEnterGetEvents|uringEnterExtArg, uintptr(unsafe.Pointer(&r.waitEA)), unsafe.Sizeof(r.waitEA))
	if errno != 0 {
		return errno
	}
	return nil
}

// cqReady returns the completions waiting: the head and the tail.
func (r *ring) cqReady() (uint32, uint32) {
	return *r.cqHead, atomic.LoadUint32(r.cqTail)
}

func (r *ring) cqe(i uint32) *uringCQE {
	return (*uringCQE)(unsafe.Add(r.cqes, uintptr(i&r.cqMask)*uringCqeSize))
}

// cqAdvance releases the completions up to head.
func (r *ring) cqAdvance(head uint32) { atomic.StoreUint32(r.cqHead, head) }

func (r *ring) close() {
	if r.ringMem != nil {
		unix.Munmap(r.ringMem) //nolint:errcheck // nothing to do
	}
	if r.sqeMem != nil {
		unix.Munmap(r.sqeMem) //nolint:errcheck // nothing to do
	}
	if r.fd >= 0 {
		unix.Close(r.fd) //nolint:errcheck // nothing to do
		r.fd = -1
	}
	// The buffer ring is the kernel's until the ring is closed.
	if r.bufRing != nil {
		unix.Munmap(r.bufRing) //nolint:errcheck // nothing to do
	}
	if r.bufMem != nil {
		unix.Munmap(r.bufMem) //nolint:errcheck // nothing to do
	}
}
