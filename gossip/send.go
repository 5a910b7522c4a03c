package gossip

// Sending: the write path (batch, coalesce, pack, eager fan-out or
// epidemic queue) and the low-level send helpers.

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/rollcall/rollcall/crdt"
	"go.uber.org/zap"
)

// Publish queues deltas of records this node wrote; the flusher sends them
// within BatchDelay. It never blocks on the network.
func (c *Cluster) Publish(deltas []crdt.Delta) {
	if len(deltas) == 0 {
		return
	}
	c.mu.Lock()
	c.pending = append(c.pending, deltas...)
	c.mu.Unlock()
	select {
	case c.flushCh <- struct{}{}:
	default:
	}
}

func (c *Cluster) flushLoop() {
	defer c.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-c.flushCh:
		}
		// Let a burst of writes share packets.
		timer.Reset(c.cfg.BatchDelay)
		select {
		case <-c.ctx.Done():
			return
		case <-timer.C:
		}
		c.flush(false)
	}
}

// flush sends everything pending. reliable forces TCP to every member (used
// on leave, when packets must not be lost).
func (c *Cluster) flush(reliable bool) {
	c.mu.Lock()
	batch := c.pending
	c.pending = nil
	c.mu.Unlock()
	if len(batch) == 0 {
		return
	}
	batch = crdt.Coalesce(batch)
	packets, oversized := PackDeltas(batch, c.cfg.PacketBudget)
	big := make(map[int]bool, len(oversized))
	for _, i := range oversized {
		big[i] = true
	}
	members := c.otherMembers()
	mode := ChooseMode(len(members)+1, c.cfg.EagerThreshold)
	for i, p := range packets {
		msg, err := encodeDeltas(p)
		if err != nil {
			c.log.Error("encode deltas", zap.Error(err))
			continue
		}
		targets := members
		switch {
		case reliable || big[i]:
			c.sendAll(targets, msg, true)
		case mode == ModeEager:
			c.sendAll(targets, msg, false)
		default:
			c.enqueueBroadcast(msg, "")
			// Seed the epidemic at once rather than at the next gossip tick.
			targets = pickRandom(members, 3)
			c.sendAll(targets, msg, false)
		}
		c.stats.DeltaCopies.Add(uint64(len(p) * len(targets)))
		c.stats.DeltaBytes.Add(uint64(len(msg) * len(targets)))
	}
}

func (c *Cluster) enqueueBroadcast(msg []byte, name string) {
	var b memberlist.Broadcast = &uniqueBroadcast{msg: msg}
	if name != "" {
		b = &namedBroadcast{msg: msg, name: name}
	}
	c.queue.QueueBroadcast(b)
	if c.queue.NumQueued() > c.cfg.MaxQueue {
		c.queue.Prune(c.cfg.MaxQueue)
		c.stats.QueuePruned.Add(1)
	}
}

// otherMembers returns the live members except this node, as copies taken
// from memberlist's events. (memberlist.Members returns pointers into its own
// state, which it keeps changing under its lock: reading them races.) A
// member memberlist holds dead but whose lease this node keeps (it was heard
// since the verdict) is live: cutting it off would leave it without our
// deltas and announcements until memberlist's view heals.
func (c *Cluster) otherMembers() []*memberlist.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*memberlist.Node, 0, len(c.peers))
	for _, p := range c.peers {
		if p.node != nil && c.liveLocked(p) {
			n := *p.node
			out = append(out, &n)
		}
	}
	return out
}

// member returns a copy of a live member's node, or nil.
func (c *Cluster) member(name string) *memberlist.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.peers[name]; p != nil && p.node != nil && c.liveLocked(p) {
		n := *p.node
		return &n
	}
	return nil
}

// liveLocked reports whether p is a member to send to: alive to
// memberlist, or held dead by memberlist but not by this node's leases.
func (c *Cluster) liveLocked(p *peer) bool {
	return p.state == "alive" || (p.state == "dead" && !c.leases.Down(p.name))
}

func pickRandom(nodes []*memberlist.Node, k int) []*memberlist.Node {
	if len(nodes) <= k {
		return nodes
	}
	out := make([]*memberlist.Node, 0, k)
	for _, i := range rand.Perm(len(nodes))[:k] {
		out = append(out, nodes[i])
	}
	return out
}

// sendAll sends msg to every node, best effort (UDP) or reliably (TCP,
// concurrently, waiting for all), and returns how many sends succeeded (for
// UDP: were handed to the network).
func (c *Cluster) sendAll(nodes []*memberlist.Node, msg []byte, reliable bool) int {
	if !reliable {
		sent := 0
		for _, n := range nodes {
			if err := c.ml.SendBestEffort(n, msg); err != nil {
				c.stats.SendErrors.Add(1)
			} else {
				sent++
			}
			c.stats.PacketsSent.Add(1)
			c.stats.BytesSent.Add(uint64(len(msg)))
			c.stats.countSent(msg, transportPacket)
		}
		return sent
	}
	var wg sync.WaitGroup
	var sent atomic.Int64
	for _, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if c.sendReliable(n, msg) {
				sent.Add(1)
			}
		}()
	}
	wg.Wait()
	return int(sent.Load())
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

func (c *Cluster) sendReliableTo(name string, msg []byte) error {
	n := c.member(name)
	if n == nil {
		return fmt.Errorf("gossip: %q is not a live member", name)
	}
	if !c.sendReliable(n, msg) {
		return fmt.Errorf("gossip: send to %q failed", name)
	}
	return nil
}
