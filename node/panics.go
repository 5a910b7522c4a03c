package node

import (
	"runtime/debug"

	"go.uber.org/zap"

	"github.com/rollcall/rollcall/protocol"
)

// Panics. A bug that panics while serving one client must cost that client
// its connection, not the gateway every session: every goroutine that
// serves one connection (reader, writer, a paused reader's, a routed
// send's, a closing one's) and every event-loop handler defers a recover.
// A panic while a request is handled closes its connection with an
// internal error line; one elsewhere aborts the connection. Either way the
// stack is logged at error level and counted (Metrics.Panics), and the
// process goes on.
//
// A recovered panic is safe when the code it unwound released what it held
// in defers. So the sections that hold the node's lock (n.mu), and the
// locks it hands off to (fanMu, pubMu), on the paths a panic is recovered
// from (request handlers, a sub's snapshot pages, connection open and
// close, the HTTP handlers, whose panics net/http recovers, and the
// cluster layer's calls) take them with lockOf and release them in a
// defer (locks.go): a panic under the lock costs its connection, and every
// other session is still served. The background loops (the notifier, the
// collector) do not recover: a panic there ends the process, which a
// supervisor restarts, rather than leave a gateway that no longer serves.

// internalErrorMessage is what a client whose request panicked is told.
const internalErrorMessage = "internal error: the gateway logged it; reconnect"

// recordPanic logs and counts a recovered panic of c's where.
func (n *Node) recordPanic(c *conn, where string, r any) {
	n.stats.panics.Add(1)
	n.log.Error("panic serving a client connection; the connection is closed and the gateway goes on",
		zap.String("where", where), zap.Uint64("conn", c.id), zap.String("remote", c.remote),
		zap.Any("panic", r), zap.ByteString("stack", debug.Stack()))
}

// recoverAbort is deferred by a goroutine or handler serving c: a panic is
// recorded and c aborted.
func (c *conn) recoverAbort(where string) {
	if r := recover(); r != nil {
		c.n.recordPanic(c, where, r)
		c.abort()
	}
}

// recoverRequest is deferred by handleLine: a panic is recorded and c
// closed with an internal error line; replied is set, as a line was
// queued.
func (c *conn) recoverRequest(replied *bool) {
	if r := recover(); r != nil {
		c.n.recordPanic(c, "request", r)
		c.closeWithError(nil, protocol.CodeInternal, internalErrorMessage)
		*replied = true
	}
}

// underLockHook runs the test hook lockedHook, if set, where a request
// handler holds n.mu.
func (n *Node) underLockHook(req *protocol.Request) {
	if n.lockedHook != nil {
		n.lockedHook(req)
	}
}
