package node

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"time"

	"go.uber.org/zap"

	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/protocol"
)

// The lame-duck drain for rolling restarts. Drain tells every client
// shutting_down, with the client addresses of the other live gateways, and
// then holds the local sessions online for Config.DrainGrace instead of
// writing them disconnected at once:
//
//	t0          draining: listener closed, /readyz and /healthz 503;
//	            every client gets shutting_down {gateways}; holding
//	t0..grace   a client reconnects to gateway B with last_epoch: B writes
//	            the newer epoch; its delta replaces ours here (and on every
//	            other gateway) and this node forgets the session without a
//	            write (afterRemoteChangeLocked). A subscriber anywhere sees
//	            the newer session before the old one ends: no offline flap.
//	            A connection that closes meanwhile does not end its session
//	            (endConnSession); an expiry still does (the client really
//	            went silent before the drain).
//	grace end   (or as soon as no session is left) every session still
//	            held is written disconnected and published, in one batch.
//
// Every step is a write or a forget under mu, so the hold, the takeovers,
// the expiries and the final writes are one ordered sequence of decisions.
// The hold applies only while the cluster lists another gateway to go to:
// a standalone node, or the last gateway of a cluster, ends its sessions
// at once.

// Drain shuts the gateway down gracefully: it stops accepting connections,
// tells every client shutting_down (with the other gateways' client
// addresses), holds the local sessions for DrainGrace while their clients
// reconnect elsewhere, then writes the rest disconnected and publishes
// those deltas. It returns when every connection is closed, or with ctx's
// error when ctx ends first (the rest are then closed hard, and the
// sessions still held are written at once). Later calls return at once.
// The replica stays usable, so the cluster layer can flush and leave
// afterwards.
func (n *Node) Drain(ctx context.Context) error {
	n.mu.Lock()
	if n.draining {
		n.mu.Unlock()
		select {
		case <-n.drained:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	n.draining = true
	n.mu.Unlock()
	defer close(n.drained)
	// Webhooks of the last writes are sent before drained closes.
	defer n.drainWebhooks(ctx)
	n.stopFeed()         // status-page streams end; the page reconnects elsewhere
	n.stopEventStreams() // so do the change streams (events.go)

	if n.ln != nil {
		n.ln.Close()
	}
	if a, ok := n.getCluster().(DrainAnnouncer); ok {
		a.AnnounceDrain()
	}
	gateways := n.otherGateways()
	grace := n.cfg.DrainGrace
	if len(gateways) == 0 {
		grace = 0 // nowhere to reconnect to: nothing to wait for
	}
	now := n.clock.Now()
	lk := lockOf(&n.mu)
	defer lk.unlock()
	var deltas []crdt.Delta
	if grace > 0 {
		n.holding = true
	} else {
		deltas = n.endLocalSessionsLocked(now)
	}
	held := n.heldCountLocked()
	conns := make([]*conn, 0, len(n.conns))
	for c := range n.conns {
		conns = append(conns, c)
	}
	n.unlockAndPublish(&lk, deltas)
	n.log.Info("draining", zap.Int("connections", len(conns)), zap.Int("sessions", held+len(deltas)),
		zap.Strings("gateways", gateways), zap.Duration("grace", max(grace, 0)))
	for _, c := range conns {
		c.closeWith(shuttingDownFrame(nil, gateways))
	}

	var err error
	if grace > 0 {
		if held > 0 {
			err = n.awaitHandover(ctx, grace)
		}
		lk = lockOf(&n.mu)
		n.holding = false
		deltas = n.endLocalSessionsLocked(n.clock.Now())
		n.unlockAndPublish(&lk, deltas)
		n.log.Info("drain grace over", zap.Int("held", held), zap.Int("taken_over_or_expired", held-len(deltas)),
			zap.Int("written_disconnected", len(deltas)))
	}
	if err == nil {
		finished := make(chan struct{})
		go func() {
			n.connWG.Wait()
			close(finished)
		}()
		select {
		case <-finished:
			return nil
		case <-ctx.Done():
			err = fmt.Errorf("node: drain: %w", ctx.Err())
		}
	}
	for _, c := range conns {
		c.abort()
	}
	return err
}

// awaitHandover waits until no local session is held (each was taken over
// by a newer epoch on another gateway, or expired), grace passes, or ctx
// ends.
func (n *Node) awaitHandover(ctx context.Context, grace time.Duration) error {
	t := time.NewTimer(grace)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("node: drain: %w", ctx.Err())
		case <-n.handedOver:
			n.mu.Lock()
			left := n.heldCountLocked()
			n.mu.Unlock()
			if left == 0 {
				return nil
			}
		}
	}
}

// endLocalSessionsLocked writes every local session disconnected and
// returns the deltas to publish.
func (n *Node) endLocalSessionsLocked(now time.Time) []crdt.Delta {
	var deltas []crdt.Delta
	for _, devs := range n.local {
		for _, c := range devs {
			if ds, ok := n.endSessionLocked(c, crdt.StateDisconnected, now); ok {
				deltas = append(deltas, ds...)
			}
		}
	}
	deltas = append(deltas, n.endAllTrackedLocked(now)...)
	n.stats.m.disconnected(codeIndex(protocol.CodeShuttingDown), sessionDeltas(deltas))
	return deltas
}

// otherGateways returns the client addresses of the other live gateways,
// from the cluster, or nil.
func (n *Node) otherGateways() []string {
	if l, ok := n.getCluster().(GatewayLister); ok {
		return l.OtherGateways()
	}
	return nil
}

// shuttingDownFrame is the shutting_down line (replying to request id, if
// any), listing gateways in a random order so the clients of a draining
// gateway spread over the others.
func shuttingDownFrame(id json.RawMessage, gateways []string) []byte {
	f := protocol.ErrorFrame{Op: protocol.OpError, Code: protocol.CodeShuttingDown, ID: id,
		Message: "the gateway is shutting down; reconnect to another gateway with last_epoch"}
	if len(gateways) > 0 {
		f.Gateways = make([]string, len(gateways))
		for i, j := range rand.Perm(len(gateways)) {
			f.Gateways[i] = gateways[j]
		}
	}
	b, err := protocol.Marshal(f)
	if err != nil {
		return encodeError(nil, protocol.CodeShuttingDown, f.Message) // only an invalid id fails, and ids are checked on decode
	}
	return b
}

// Readiness reports whether the gateway should be sent new clients (GET
// /readyz): it has started listening, the cluster layer (if it reports
// readiness) has joined and caught up, and it is not draining. status is
// one word (ready, starting, joining, draining); reason explains it.
func (n *Node) Readiness() (ready bool, status, reason string) {
	lk := lockOf(&n.mu)
	defer lk.unlock()
	draining := n.draining
	lk.unlock()
	switch {
	case draining:
		return false, "draining", "the gateway is shutting down"
	case !n.started.Load():
		return false, "starting", "the gateway is not listening yet"
	}
	if r, ok := n.getCluster().(ReadinessReporter); ok {
		if ok, why := r.Readiness(); !ok {
			return false, "joining", why
		}
	}
	return true, "ready", ""
}
