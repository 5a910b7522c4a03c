package gossip

// Sending: the owner's writes into the core, and the low-level send
// helpers that execute its Ready.

import (
	"fmt"

	gometrics "github.com/hashicorp/go-metrics"
	"github.com/hashicorp/memberlist"
	"go.uber.org/zap"

	"github.com/rollcall/rollcall/crdt"
)

// Publish queues deltas of records this node wrote; they go out at once,
// or within BatchDelay when a flush opened a write window (see
// Config.BatchDelay). It never blocks on the network, and takes only a
// lock of its own: the host publishes with its own locks held, while the
// loop holds the Cluster's mutex when the core reads the host (watermarks,
// session count), so Publish must not wait for the Cluster's mutex.
func (c *Cluster) Publish(deltas []crdt.Delta) {
	if len(deltas) == 0 {
		return
	}
	c.pubMu.Lock()
	c.pubQ = append(c.pubQ, deltas...)
	c.pubMu.Unlock()
	select {
	case c.flushCh <- struct{}{}:
	default:
	}
}

// takePublished hands the deltas queued by Publish to the core. Called with
// mu held.
func (c *Cluster) takePublishedLocked(now int64) {
	c.pubMu.Lock()
	q := c.pubQ
	c.pubQ = nil
	c.pubMu.Unlock()
	c.core.Publish(q, now)
	if c.wan != nil {
		c.regions.Forward(q, now)
	}
}

func (c *Cluster) enqueueBroadcast(msg []byte, name string) {
	c.queue.QueueBroadcast(NewBroadcast(msg, name))
	if c.queue.NumQueued() > c.cfg.MaxQueue {
		c.queue.Prune(c.cfg.MaxQueue)
		c.stats.QueuePruned.Add(1)
	}
}

// sendBestEffort sends msg in a UDP packet of its own, to a member at
// address a: framed here and written to the transport when packets are
// plain (the same packet memberlist's SendBestEffort makes, without its
// allocations and address lookups per packet), else by memberlist. framed,
// if not nil, is msg framed already (by an earlier call for another
// member); the packet framed is returned, for the next.
func (c *Cluster) sendBestEffort(n *memberlist.Node, a memberlist.Address, msg, framed []byte) []byte {
	var err error
	if c.packets != nil && n.PMax >= 5 && a.Addr != "" {
		if framed == nil {
			framed = userPacket(msg)
		}
		gometrics.IncrCounterWithLabels([]string{"memberlist", "udp", "sent"}, float32(len(framed)), nil)
		// No transport keeps the packet past the call (a delayed or held
		// one copies it), so the next member's may be the same.
		_, err = c.packets.WriteToAddress(framed, a)
	} else {
		err = c.ml.SendBestEffort(n, msg)
	}
	if err != nil {
		c.stats.SendErrors.Add(1)
	}
	c.stats.PacketsSent.Add(1)
	c.stats.BytesSent.Add(uint64(len(msg)))
	c.stats.countSent(msg, transportPacket)
	return framed
}

func (c *Cluster) sendReliable(n *memberlist.Node, msg []byte) bool {
	c.stats.StreamsSent.Add(1)
	c.stats.BytesSent.Add(uint64(len(msg)))
	c.stats.countSent(msg, transportStream)
	if err := c.ml.SendReliable(n, msg); err != nil {
		c.stats.SendErrors.Add(1)
		c.log.Debug("reliable send failed", zap.String("to", n.Name), zap.Error(err))
		return false
	}
	return true
}

// sendReliableTo sends msg over a stream to a member the core counts live.
func (c *Cluster) sendReliableTo(name string, msg []byte) error {
	c.mu.Lock()
	var n *memberlist.Node
	if c.core.Live(name) {
		n = c.view.node(name)
	}
	c.mu.Unlock()
	if n == nil {
		return fmt.Errorf("gossip: %q is not a live member", name)
	}
	if !c.sendReliable(n, msg) {
		return fmt.Errorf("gossip: send to %q failed", name)
	}
	return nil
}

// liveMembers returns the names of the members the core counts live.
func (c *Cluster) liveMembers() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, name := range c.view.names {
		if c.core.Live(name) {
			out = append(out, name)
		}
	}
	return out
}
