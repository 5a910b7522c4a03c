//go:build linux

package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// tapLink is a delayed Ethernet link between two network namespaces, for
// kernels without sch_netem: a TAP device in each (to be put on a bridge
// there), and this process forwarding every frame from one to the other
// after the delay, in order. Setting either device down cuts the link both
// ways: its bridge sends nothing to it, and frames written to it are
// dropped.
type tapLink struct {
	a, b  *os.File
	delay time.Duration
	wg    sync.WaitGroup
}

// newTapLink creates TAP device nameA in the namespace at nsA (a path such
// as /var/run/netns/NAME) and nameB in nsB, and forwards between them with
// delay each way until Close.
func newTapLink(nsA, nameA, nsB, nameB string, delay time.Duration) (*tapLink, error) {
	a, err := openTap(nsA, nameA)
	if err != nil {
		return nil, err
	}
	b, err := openTap(nsB, nameB)
	if err != nil {
		a.Close()
		return nil, err
	}
	l := &tapLink{a: a, b: b, delay: delay}
	l.wg.Add(2)
	go l.forward(a, b)
	go l.forward(b, a)
	return l, nil
}

// openTap creates TAP device name in the namespace at nsPath and returns it
// open, non-blocking (served by the runtime's poller, so Close ends reads).
// The device lives as long as the file.
func openTap(nsPath, name string) (*os.File, error) {
	runtime.LockOSThread() // setns changes this thread only
	orig, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	defer orig.Close()
	target, err := os.Open(nsPath)
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("setns %s: %w", nsPath, err)
	}
	fd, openErr := createTap(name)
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		// The thread stays in the other namespace: leave it locked, so it
		// ends with this goroutine instead of running others.
		if openErr == nil {
			unix.Close(fd)
		}
		return nil, fmt.Errorf("setns back: %w", err)
	}
	runtime.UnlockOSThread()
	if openErr != nil {
		return nil, openErr
	}
	return os.NewFile(uintptr(fd), name), nil
}

// createTap creates TAP device name in this thread's namespace.
func createTap(name string) (int, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return -1, fmt.Errorf("open /dev/net/tun: %w", err)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("TUNSETIFF %s: %w", name, err)
	}
	return fd, nil
}

// forward copies frames from src to dst, each sent delay after it was read.
func (l *tapLink) forward(src, dst *os.File) {
	defer l.wg.Done()
	type frame struct {
		due time.Time
		b   []byte
	}
	queue := make(chan frame, 4096)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for f := range queue {
			time.Sleep(time.Until(f.due))
			_, _ = dst.Write(f.b) // a device set down drops the frame (EIO)
		}
	}()
	buf := make([]byte, 65536)
	for {
		n, err := src.Read(buf)
		if err != nil {
			if errors.Is(err, os.ErrClosed) {
				break
			}
			if errors.Is(err, unix.EIO) || errors.Is(err, unix.EAGAIN) {
				time.Sleep(time.Millisecond) // the device is down
				continue
			}
			break
		}
		select {
		case queue <- frame{due: time.Now().Add(l.delay), b: append([]byte(nil), buf[:n]...)}:
		default: // a full queue drops, as a router's would
		}
	}
	close(queue)
	<-done
}

// Close removes both devices and stops forwarding.
func (l *tapLink) Close() {
	l.a.Close()
	l.b.Close()
	l.wg.Wait()
}
