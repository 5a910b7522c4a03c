package gossip

// Requests that expect an answer: routed messages, kicks and keyring steps,
// each answered by a msgRouteAck carrying the request id.

import (
	"context"
	"fmt"

	"go.uber.org/zap"

	"github.com/rollcall/rollcall/cluster"

	"github.com/rollcall/rollcall/dissem"
)

func (c *Cluster) goRoute(r dissem.RouteReq) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		n := c.host.DeliverLocal(cluster.Message{To: r.To, From: r.From, FromDevice: r.FromDevice, Body: r.Body})
		c.reply(r.FromNode, dissem.RouteAck{ID: r.ID, Delivered: n})
	}()
}

func (c *Cluster) goKick(k dissem.KickReq) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		n := c.host.KickLocal(k.User, k.Device)
		c.reply(k.FromNode, dissem.RouteAck{ID: k.ID, Delivered: n})
	}()
}

func (c *Cluster) goReply(to string, ack dissem.RouteAck) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.reply(to, ack)
	}()
}

// reply answers a request with an ack.
func (c *Cluster) reply(to string, ack dissem.RouteAck) {
	msg, err := dissem.EncodeRouteAck(ack)
	if err == nil {
		err = c.sendReliableTo(to, msg)
	}
	if err != nil {
		c.log.Debug("ack failed", zap.String("to", to), zap.Error(err))
	}
}

// Route delivers msg through the gateway that owns the recipient's
// sessions and returns how many sessions it reached there.
func (c *Cluster) Route(ctx context.Context, gateway string, msg cluster.Message) (int, error) {
	if gateway == c.cfg.Name {
		return c.host.DeliverLocal(msg), nil
	}
	if len(msg.Body) > dissem.MaxBodyBytes {
		return 0, fmt.Errorf("gossip: message body of %d bytes exceeds %d", len(msg.Body), dissem.MaxBodyBytes)
	}
	c.mu.Lock()
	_, remote := c.regions.RegionOf(gateway)
	c.mu.Unlock()
	if remote {
		return c.routeVia(ctx, gateway, msg)
	}
	return c.request(ctx, gateway, func(id uint64) ([]byte, error) {
		return dissem.EncodeRouteReq(dissem.RouteReq{ID: id, FromNode: c.cfg.Name, To: msg.To, From: msg.From, FromDevice: msg.FromDevice, Body: msg.Body})
	})
}

// Kick asks the gateway named gateway to end the sessions of user it owns
// (of device only, unless empty), and returns how many it ended.
func (c *Cluster) Kick(ctx context.Context, gateway, user, device string) (int, error) {
	if gateway == c.cfg.Name {
		return c.host.KickLocal(user, device), nil
	}
	c.mu.Lock()
	_, remote := c.regions.RegionOf(gateway)
	c.mu.Unlock()
	if remote {
		return c.kickVia(ctx, gateway, user, device)
	}
	return c.request(ctx, gateway, func(id uint64) ([]byte, error) {
		return dissem.EncodeKickReq(dissem.KickReq{ID: id, FromNode: c.cfg.Name, User: user, Device: device})
	})
}

// request sends a message that the peer answers with a msgRouteAck carrying
// the same id, and waits for the answer (at most RouteTimeout).
func (c *Cluster) request(ctx context.Context, to string, encode func(id uint64) ([]byte, error)) (int, error) {
	return c.requestOn(ctx, to, false, encode)
}

// requestOn is request to a member of this region, or (wan) of the WAN
// pool.
func (c *Cluster) requestOn(ctx context.Context, to string, wan bool, encode func(id uint64) ([]byte, error)) (int, error) {
	c.routeMu.Lock()
	c.routeSeq++
	id := c.routeSeq
	ch := make(chan dissem.RouteAck, 1)
	c.routes[id] = ch
	c.routeMu.Unlock()
	defer func() {
		c.routeMu.Lock()
		delete(c.routes, id)
		c.routeMu.Unlock()
	}()
	b, err := encode(id)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RouteTimeout)
	defer cancel()
	if wan {
		err = c.sendWAN(to, b, true)
	} else {
		err = c.sendReliableTo(to, b)
	}
	if err != nil {
		return 0, err
	}
	select {
	case ack := <-ch:
		if ack.Err != "" {
			return ack.Delivered, fmt.Errorf("%s: %s", to, ack.Err)
		}
		return ack.Delivered, nil
	case <-ctx.Done():
		return 0, fmt.Errorf("gossip: request to %s: %w", to, ctx.Err())
	}
}
