package node

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/protocol"
)

// handleSend delivers a message to every active session of the recipient:
// this node's directly, every other gateway's through one Cluster.Route call
// per gateway, all concurrently and bounded by RouteTimeout. It replies with
// the number of sessions reached (0 for an invisible recipient the sender
// does not see, and a group grant does not reach it: invisible.go).
func (n *Node) handleSend(c *conn, req *protocol.Request) (any, *requestError) {
	if rerr := checkName("to", req.To); rerr != nil {
		return nil, rerr
	}
	if rerr := checkBody(req.Body); rerr != nil {
		return nil, rerr
	}
	lk := lockOf(&n.mu)
	defer lk.unlock()
	s, rerr := n.ownedLocked(c)
	if rerr != nil {
		lk.unlock()
		return nil, rerr
	}
	recipients := n.activeSessionsLocked(req.To)
	// To a sender that does not see it, an invisible recipient is offline
	// (invisible.go): a group grant is checked against no online groups,
	// so it refuses the send as it would to an offline user, and the
	// message reaches nobody. A sender whose grant names the recipient (or
	// everyone) reaches it, told no session did.
	hidden := !c.viewer().sees(req.To) && n.replica.Invisible(req.To, n.clock.Now().UnixNano())
	if rerr := checkSend(c, req.To, func() []string {
		if hidden {
			return nil
		}
		return sessionGroups(recipients)
	}); rerr != nil {
		lk.unlock()
		return nil, rerr
	}
	shown := func(k int) *int {
		if hidden {
			k = 0
		}
		return &k
	}
	lim := n.limits.Load()
	if ok, wait := s.sends.allow(n.mono(), lim.SendRate, lim.SendBurst); !ok {
		lk.unlock()
		n.stats.rateLimited.Add(1)
		return nil, errorf(protocol.CodeRateLimited, "at most %g sends per second (%d at once) per session; the next is allowed in %dms",
			lim.SendRate, lim.SendBurst, max(wait.Milliseconds(), 1))
	}
	msg := Message{To: req.To, From: s.user, FromDevice: s.device, Body: slices.Clone(req.Body)}
	remote := n.remoteGateways(recipients)
	lk.unlock()

	delivered := n.DeliverLocal(msg)
	if len(remote) > 0 {
		if c.poll != nil {
			// Routing waits for the other gateways (up to RouteTimeout),
			// which must not hold up the poller and every connection on
			// it: route on a goroutine, which queues the reply, and have
			// the reader handle c's next request only after it (c.await).
			done := make(chan struct{})
			id := req.ID
			go func() {
				defer close(done)
				defer c.recoverRequest(new(bool))
				total := delivered + n.routeFor(c, msg, remote)
				c.sendValue(protocol.OK{Op: protocol.OpOK, ID: id, Delivered: shown(total)})
			}()
			c.await = done
			return nil, nil
		}
		delivered += n.routeFor(c, msg, remote)
	}
	return protocol.OK{Op: protocol.OpOK, ID: req.ID, Delivered: shown(delivered)}, nil
}

// routeFor is route for a request of c, whose reader waits for it: c's
// session does not expire during the wait, and its silence counts from
// the answer (the requests it sent meanwhile are read after it).
func (n *Node) routeFor(c *conn, msg Message, gateways []string) int {
	c.routing.Add(1)
	defer func() {
		c.lastActive.Store(max(c.lastActive.Load(), n.mono()))
		c.routing.Add(-1)
	}()
	return n.route(msg, gateways)
}

// remoteGateways returns the gateways other than this one that own
// sessions, each once.
func (n *Node) remoteGateways(sessions []crdt.Session) []string {
	var out []string
	for _, s := range sessions {
		if s.Gateway != n.cfg.Name && !slices.Contains(out, s.Gateway) {
			out = append(out, s.Gateway)
		}
	}
	return out
}

// sendFrom delivers msg to every active session of msg.To, as send does
// (handleSend): this node's directly, every other gateway's through
// route. It returns the number of sessions reached.
func (n *Node) sendFrom(msg Message) int {
	lk := lockOf(&n.mu)
	defer lk.unlock()
	remote := n.remoteGateways(n.activeSessionsLocked(msg.To))
	lk.unlock()
	delivered := n.DeliverLocal(msg)
	if len(remote) > 0 {
		delivered += n.route(msg, remote)
	}
	return delivered
}

// sessionGroups returns the groups of sessions, unsorted, possibly with
// repeats.
func sessionGroups(sessions []crdt.Session) []string {
	var out []string
	for _, s := range sessions {
		out = append(out, s.Groups...)
	}
	return out
}

// route hands msg to each remote gateway concurrently and sums the sessions
// reached. Without a cluster, remote sessions cannot be reached.
func (n *Node) route(msg Message, gateways []string) int {
	cl := n.getCluster()
	if cl == nil {
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.RouteTimeout)
	defer cancel()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		total int
	)
	for _, gw := range gateways {
		wg.Go(func() {
			k, err := cl.Route(ctx, gw, msg)
			if err != nil {
				n.stats.routeFailures.Add(1)
				n.log.Info("route failed", zap.String("gateway", gw), zap.String("to", msg.To), zap.Error(err))
				return
			}
			mu.Lock()
			total += k
			mu.Unlock()
		})
	}
	wg.Wait()
	return total
}

// DeliverLocal delivers a message to the active sessions of msg.To that
// this node owns and returns how many it reached. A session whose queue is
// past its share for messages (conn.sendMessage) misses the message and is
// not counted: messages never cost a recipient its connection. It is part
// of Host: the cluster layer calls it for messages routed here.
func (n *Node) DeliverLocal(msg Message) int {
	if rerr := checkBody(msg.Body); rerr != nil {
		// Routed messages come from peers: never pass on what a client
		// could not parse.
		n.log.Info("dropping message with an invalid body", zap.String("to", msg.To), zap.String("from", msg.From), zap.String("why", rerr.msg))
		return 0
	}
	lk := lockOf(&n.mu)
	defer lk.unlock()
	devs := n.local[msg.To]
	conns := make([]*conn, 0, len(devs))
	for _, c := range devs {
		conns = append(conns, c)
	}
	lk.unlock()
	if len(conns) == 0 {
		return 0
	}
	frame := encodeLine(protocol.MessageFrame{Op: protocol.OpMessage, From: msg.From, FromDevice: msg.FromDevice, Body: msg.Body})
	k := 0
	for _, c := range conns {
		if c.sendMessage(frame) {
			k++
		}
	}
	n.stats.messages.Add(uint64(k))
	n.stats.messageDrops.Add(uint64(len(conns) - k))
	return k
}

// checkBody validates a message body: one well-formed JSON value in valid
// UTF-8. json.Valid alone accepts invalid UTF-8 inside strings, and the
// body is passed on as it came, so both are checked: at the sender's
// gateway (handleSend) and again where it is delivered (DeliverLocal).
func checkBody(body []byte) *requestError {
	switch {
	case len(body) == 0:
		return errorf(protocol.CodeBadRequest, "missing body")
	case !utf8.Valid(body):
		return errorf(protocol.CodeBadRequest, "body is not valid UTF-8")
	case !json.Valid(body):
		return errorf(protocol.CodeBadRequest, "body is not a JSON value")
	}
	return nil
}
