package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// signalHandler turns the process's signals into the life of a command:
//   - the first SIGINT or SIGTERM cancels the context the command runs
//     under (the agent drains);
//   - a second one, while that shutdown runs, exits at once with status 1;
//   - SIGHUP calls the hook set with onHangup (the agent's reload) and
//     changes nothing else; with no hook it is a shutdown signal like
//     SIGTERM (a closed terminal ends `rollcall connect`).
type signalHandler struct {
	stderr io.Writer
	exit   func(code int)

	mu     sync.Mutex // guards the hooks
	hangup func()
	second func(os.Signal)
}

func newSignalHandler(stderr io.Writer, exit func(int)) *signalHandler {
	return &signalHandler{stderr: stderr, exit: exit}
}

// notify handles the process's signals from now on. The returned context
// ends at the first shutdown signal; stop releases the signals.
func (h *signalHandler) notify(parent context.Context) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancel(parent)
	ch := make(chan os.Signal, 8)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.handle(ch, cancel)
	}()
	return ctx, func() {
		signal.Stop(ch)
		close(ch)
		<-done
		cancel()
	}
}

// handle acts on signals from ch until it is closed.
func (h *signalHandler) handle(ch <-chan os.Signal, cancel func()) {
	shuttingDown := false
	for sig := range ch {
		hangup, second := h.hooks()
		if sig == syscall.SIGHUP && hangup != nil {
			if !shuttingDown {
				go hangup()
			}
			continue
		}
		if !shuttingDown {
			shuttingDown = true
			cancel()
			continue
		}
		if second != nil {
			second(sig)
		} else {
			fmt.Fprintf(h.stderr, "rollcall: second signal (%v) during shutdown: exiting at once\n", sig)
		}
		h.exit(1)
		return
	}
}

func (h *signalHandler) hooks() (hangup func(), second func(os.Signal)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.hangup, h.second
}

// onHangup makes SIGHUP call f (nil: SIGHUP shuts down).
func (h *signalHandler) onHangup(f func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.hangup = f
}

// onSecondSignal makes a second shutdown signal call f, to log it, before
// the process exits (nil: a line on stderr).
func (h *signalHandler) onSecondSignal(f func(os.Signal)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.second = f
}

type signalHandlerKey struct{}

// withSignalHandler hands h to the command run under ctx.
func withSignalHandler(ctx context.Context, h *signalHandler) context.Context {
	return context.WithValue(ctx, signalHandlerKey{}, h)
}

// signalHandlerFrom returns the handler of the process's signals, nil when
// the command was not started by main (a test calling it directly).
func signalHandlerFrom(ctx context.Context) *signalHandler {
	h, _ := ctx.Value(signalHandlerKey{}).(*signalHandler)
	return h
}
