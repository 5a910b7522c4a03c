package node

import (
	"errors"
	"net"
	"time"

	"go.uber.org/zap"

	"github.com/rollcall/rollcall/protocol"
)

// acceptLoop accepts client connections until the listener closes. spare
// is the descriptor refuseWithoutFDs (fdlimit.go) frees to answer a client
// when the process is out of them; acceptLoop closes it on return.
func (n *Node) acceptLoop(ln net.Listener, spare *spareFD) {
	defer n.loops.Done()
	defer spare.close()
	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors: answer one client overloaded
			// with the spare descriptor, rather than leave it waiting.
			if n.refuseWithoutFDs(ln, spare, err) {
				backoff = 0
				continue
			}
			// Out of file descriptors and the like: back off, never spin.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			n.log.Warn("accept failed; retrying", zap.Error(err), zap.Duration("backoff", backoff))
			select {
			case <-time.After(backoff):
				continue
			case <-n.done:
				return
			}
		}
		backoff = 0
		n.stats.accepted.Add(1)
		n.serveClient(nc, n.tls == nil, func() *conn { return n.newConn(nc) })
	}
}

// serveClient admits and serves an established client connection (a TCP
// socket from the accept loop, or a WebSocket from GET /ws): the same
// drain check, connection limits and accounting for both. plain reports
// whether a refusal may write its error line now (not before a TLS
// handshake). newc builds the conn.
func (n *Node) serveClient(nc net.Conn, plain bool, newc func() *conn) {
	lk := lockOf(&n.mu)
	defer lk.unlock()
	if n.draining {
		lk.unlock()
		// Drain closed the listener, but a connection may have been
		// accepted just before.
		if plain {
			nc.SetWriteDeadline(time.Now().Add(time.Second))    //nolint:errcheck // best effort
			nc.Write(shuttingDownFrame(nil, n.otherGateways())) //nolint:errcheck // best effort
		}
		nc.Close()
		return
	}
	ip := n.sourceKey(nc.RemoteAddr())
	if code, msg := n.admitLocked(ip); code != "" {
		lk.unlock()
		n.refuse(nc, plain, code, msg)
		return
	}
	c := newc()
	c.ip = ip
	n.conns[c] = struct{}{}
	n.countConnLocked(c, true)
	n.connWG.Add(1)
	lk.unlock()
	c.serve()
}

// refuse closes a connection the accept loop will not serve, after a
// best-effort error line on plain TCP (over TLS it would need a handshake in
// the accept loop; see tls.go).
func (n *Node) refuse(nc net.Conn, plain bool, code protocol.ErrorCode, msg string) {
	if plain {
		nc.SetWriteDeadline(time.Now().Add(time.Second)) //nolint:errcheck // best effort
		nc.Write(encodeError(nil, code, msg))            //nolint:errcheck // best effort
	}
	nc.Close()
}

// dispatch runs one decoded request on the connection's reader goroutine.
// Replies are queued in request order.
func (n *Node) dispatch(c *conn, req *protocol.Request) {
	if n.requestHook != nil {
		n.requestHook(req)
	}
	if req.Op == protocol.OpHello {
		n.handleHello(c, req)
		return
	}
	if c.state.Load() != stateActive {
		c.sendError(req.ID, protocol.CodeNotAuthenticated, "send hello first")
		return
	}
	// Any valid request refreshes the deadline.
	c.lastActive.Store(n.mono())
	var (
		reply any
		rerr  *requestError
	)
	switch req.Op {
	case protocol.OpHB:
		if req.ID == nil {
			return
		}
		reply = protocol.HBReply{Op: protocol.OpHB, ID: req.ID, ExpiresAt: n.formatTime(n.clock.Now().Add(n.cfg.Timeout))}
	case protocol.OpStatus:
		reply, rerr = n.handleStatus(c, req)
	case protocol.OpAccount:
		reply, rerr = n.handleAccount(c, req)
	case protocol.OpJoin, protocol.OpLeave:
		reply, rerr = n.handleJoinLeave(c, req)
	case protocol.OpGet:
		reply, rerr = n.handleGet(c, req)
	case protocol.OpGroup:
		reply, rerr = n.handleGroup(c, req)
	case protocol.OpLocate:
		reply, rerr = n.handleLocate(c, req)
	case protocol.OpSub:
		// handleSub queues its reply itself, ahead of the first events.
		if rerr = n.handleSub(c, req); rerr == nil {
			return
		}
	case protocol.OpUnsub:
		reply, rerr = n.handleUnsub(c, req)
	case protocol.OpSend:
		// A send routed to other gateways on the event loop queues its
		// reply itself (handleSend): reply and rerr are both nil.
		if reply, rerr = n.handleSend(c, req); reply == nil && rerr == nil {
			return
		}
	case protocol.OpRefresh:
		reply, rerr = n.handleRefresh(c, req)
	case protocol.OpMeta:
		reply, rerr = n.handleMeta(c, req)
	case protocol.OpTrack:
		reply, rerr = n.handleTrack(c, req)
	case protocol.OpUntrack:
		reply, rerr = n.handleUntrack(c, req)
	case protocol.OpBye:
		rerr = n.handleBye(c, req)
		if rerr == nil {
			return
		}
	default:
		rerr = errorf(protocol.CodeUnknownOp, "unknown op %q", truncate(req.Op, 64))
	}
	if rerr != nil {
		if rerr.code == protocol.CodeForbidden {
			n.stats.forbidden.Add(1)
		}
		n.stats.badRequests.Add(1)
		c.sendError(req.ID, rerr.code, rerr.msg)
		return
	}
	c.sendValue(reply)
}

// formatTime formats a time for the wire: RFC 3339 in UTC, milliseconds.
func (n *Node) formatTime(t time.Time) string {
	return t.UTC().Format("2006-01-02T15:04:05.000Z07:00")
}
