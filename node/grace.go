package node

import (
	"time"

	"go.uber.org/zap"

	"github.com/rollcall/rollcall/crdt"
)

// The disconnect grace. A phone that changes networks loses its TCP
// connection without a bye and reconnects a moment later; writing its
// session disconnected at once would show every subscriber the user going
// offline and back. So a session whose client dropped the connection (the
// reader saw EOF or a reset, or a write failed: connLost with no close
// code) stays online, unwritten, for Config.DisconnectGrace:
//
//	drop        connLost: startGraceLocked keeps the session registered
//	            (n.local) and places the closed connection in the deadline
//	            wheel at now + grace (conn.graceDeadline)
//	reconnect   a hello of the same (user, device), here or on another
//	            gateway, issues a newer epoch (above last_epoch and every
//	            epoch held); its active record replaces the held one: here
//	            in handleHello, elsewhere when its delta arrives
//	            (afterRemoteChangeLocked). The held session is forgotten
//	            without a write, so no reader sees it offline.
//	grace end   the sweeper finds the connection due and graceOver writes
//	            the session disconnected (expired, if its silence deadline
//	            had passed too), unless a newer epoch took it meanwhile.
//
// bye, the closes the gateway decides (a closing error code: slow
// consumer, expiry, line too long ...), and Close end the session at once
// as before; while Drain holds the sessions, Drain decides (drain.go). A
// session in grace has no connection: messages routed to it are not
// delivered (send's delivered count leaves it out), and reads show it with
// its last status until the grace ends.

// startGraceLocked holds c's session for Config.DisconnectGrace instead of
// ending it, and reports whether it did: only when the grace is on, the
// node is neither draining nor closed, c still owns its session, and c
// closes without a close code of the gateway's (the client dropped it).
// The caller holds n.mu.
func (n *Node) startGraceLocked(c *conn, now time.Time) bool {
	grace := n.cfg.DisconnectGrace
	if grace <= 0 || n.draining || n.closed() {
		return false
	}
	if _, rerr := n.ownedLocked(c); rerr != nil {
		return false
	}
	if c.q.disconnectReason() != reasonClosed {
		return false
	}
	c.graceDeadline.Store(n.monoAt(now) + int64(grace))
	n.wheel.add(c, c.deadline(int64(n.cfg.Timeout)))
	n.log.Debug("connection dropped; session held for the disconnect grace", zap.Uint64("conn", c.id),
		zap.String("user", c.sess.user), zap.String("device", c.sess.device), zap.Duration("grace", grace))
	return true
}

// graceOver ends the held session of c, whose deadline (conn.deadline:
// the grace's, or an earlier silence or token deadline) has passed, unless
// a newer epoch took it over. nowMono is the sweeper's reading of
// Node.mono.
func (n *Node) graceOver(c *conn, nowMono int64) {
	now := n.clock.Now()
	lk := lockOf(&n.mu)
	defer lk.unlock()
	if _, rerr := n.ownedLocked(c); rerr != nil {
		lk.unlock() // taken over: the newer record replaced it
		return
	}
	if deadline := c.deadline(int64(n.cfg.Timeout)); !crdt.Expired(deadline, nowMono) {
		lk.unlock()
		n.wheel.add(c, deadline)
		return
	}
	st := crdt.StateDisconnected
	if crdt.Expired(crdt.ExpiryDeadline(c.lastActive.Load(), n.cfg.Timeout), nowMono) {
		st = crdt.StateExpired // silent before it dropped: it expires as it would have
	}
	var deltas []crdt.Delta
	if ds, ok := n.endSessionLocked(c, st, now); ok {
		deltas = append(deltas, ds...)
	}
	c.graceDeadline.Store(0)
	n.unlockAndPublish(&lk, deltas)
	if st == crdt.StateExpired {
		n.stats.expired.Add(uint64(sessionDeltas(deltas)))
	} else {
		n.stats.m.disconnected(reasonClosed, sessionDeltas(deltas))
	}
	n.log.Debug("disconnect grace over; session ended", zap.Uint64("conn", c.id), zap.String("state", st.String()))
}

// closed reports whether Close has begun.
func (n *Node) closed() bool {
	select {
	case <-n.done:
		return true
	default:
		return false
	}
}
