package node

import (
	"context"
	"slices"
	"sync"

	"go.uber.org/zap"

	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/protocol"
)

// Kicks: the app's backend ends a user's sessions (POST
// /v1/users/{user}/disconnect). The gateway that receives the request asks
// every gateway owning one of the user's active sessions, itself included,
// to end them; each owner writes its sessions disconnected (one writer per
// record) and closes their connections with kicked:
//
//	receiving gateway   disconnectUser: the owners from its replica; its
//	                    own sessions through KickLocal, every other
//	                    owner's through the Cluster's Kick (Kicker),
//	                    concurrently, bounded by RouteTimeout
//	owning gateway      KickLocal: under mu, writes each matching session
//	                    disconnected and forgets it; then publishes and
//	                    queues kicked on each connection
//
// A session held for the disconnect grace (its connection already gone)
// or by a drain is ended the same way. A hello after the kick opens a new
// session: a kick ends sessions, it does not ban a user.

// Kicker is implemented by a Cluster that can ask another gateway to end
// the sessions of a user it owns (gossip.Cluster does). Without it a
// gateway ends only its own sessions.
type Kicker interface {
	// Kick asks gateway to end user's sessions it owns (of device only,
	// unless device is empty) and returns how many it ended.
	Kick(ctx context.Context, gateway, user, device string) (int, error)
}

// kickMessage is the message of the kicked error a kicked client gets.
const kickMessage = "the app's backend ended this session"

// KickLocal ends the sessions of user this node owns, of device only
// unless device is empty: it writes each disconnected, publishes the
// writes, and closes each connection with kicked. It returns how many
// sessions it ended. It is part of Host: the cluster layer calls it for
// kicks routed here.
func (n *Node) KickLocal(user, device string) int {
	now := n.clock.Now()
	lk := lockOf(&n.mu)
	defer lk.unlock()
	devs := n.local[user]
	conns := make([]*conn, 0, len(devs))
	for d, c := range devs {
		if device == "" || d == device {
			conns = append(conns, c)
		}
	}
	// In device order: the deltas' order does not depend on map order.
	slices.SortFunc(conns, func(a, b *conn) int {
		switch {
		case a.sess.device < b.sess.device:
			return -1
		case a.sess.device > b.sess.device:
			return 1
		}
		return 0
	})
	deltas := make([]crdt.Delta, 0, len(conns))
	ended := conns[:0]
	for _, c := range conns {
		if ds, ok := n.endSessionLocked(c, crdt.StateDisconnected, now); ok {
			deltas = append(deltas, ds...)
			ended = append(ended, c)
			c.graceDeadline.Store(0)
		}
	}
	n.unlockAndPublish(&lk, deltas)
	n.stats.m.disconnected(codeIndex(protocol.CodeKicked), sessionDeltas(deltas))
	for _, c := range ended {
		n.log.Debug("session kicked", zap.Uint64("conn", c.id), zap.String("user", user), zap.String("device", c.sess.device))
		c.closeWithError(nil, protocol.CodeKicked, kickMessage)
	}
	return len(ended)
}

// disconnectUser ends user's active sessions (of device only, unless
// empty) wherever they are: this node's at once, every other owner's
// through the cluster, concurrently and bounded by RouteTimeout. It
// returns how many sessions were ended and the gateways that could not be
// asked (or did not answer), sorted.
func (n *Node) disconnectUser(user, device string) (ended int, unreached []string) {
	lk := lockOf(&n.mu)
	defer lk.unlock()
	sessions := n.activeSessionsLocked(user)
	if device != "" {
		sessions = slices.DeleteFunc(sessions, func(s crdt.Session) bool { return s.Device != device })
	}
	remote := n.remoteGateways(sessions)
	lk.unlock()
	ended = n.KickLocal(user, device)
	if len(remote) == 0 {
		return ended, nil
	}
	k, _ := n.getCluster().(Kicker)
	if k == nil {
		slices.Sort(remote)
		return ended, remote
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.RouteTimeout)
	defer cancel()
	var (
		wg sync.WaitGroup
		mu sync.Mutex
	)
	for _, gw := range remote {
		wg.Go(func() {
			got, err := k.Kick(ctx, gw, user, device)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				n.stats.routeFailures.Add(1)
				n.log.Info("kick failed", zap.String("gateway", gw), zap.String("user", user), zap.Error(err))
				unreached = append(unreached, gw)
				return
			}
			ended += got
		})
	}
	wg.Wait()
	slices.Sort(unreached)
	return ended, unreached
}
