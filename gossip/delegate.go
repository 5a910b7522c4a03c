package gossip

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"slices"

	"github.com/hashicorp/memberlist"
	"go.uber.org/zap"

	"github.com/rollcall/rollcall/dissem"
)

// delegate is the Cluster's memberlist.Delegate. memberlist calls it from
// its own goroutines; every method must be quick and thread-safe.
type delegate Cluster

var _ memberlist.Delegate = (*delegate)(nil)

func (d *delegate) NodeMeta(limit int) []byte {
	bridge := d.cfg.WANBindAddr != ""
	b := dissem.EncodeMeta(dissem.Meta{Incarnation: d.cfg.Incarnation, ClientAddr: d.cfg.ClientAddr, Bridge: bridge})
	if len(b) > limit {
		return dissem.EncodeMeta(dissem.Meta{Incarnation: d.cfg.Incarnation, Bridge: bridge})
	}
	return b
}

// NotifyMsg receives a user message (packet or stream). memberlist may reuse
// the buffer, so it is copied.
func (d *delegate) NotifyMsg(b []byte) {
	(*Cluster)(d).enqueue(slices.Clone(b))
}

func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte {
	bs := d.queue.GetBroadcasts(overhead, limit)
	for _, b := range bs {
		d.stats.countSent(b, transportBroadcast)
	}
	return bs
}

// LocalState is our half of memberlist's push/pull: our digest. The peer
// answers it with a sync of what we lack.
func (d *delegate) LocalState(join bool) []byte {
	m, err := dissem.NewDigest(dissem.TypeState, d.cfg.Name, d.host.Digest())
	if err != nil {
		d.log.Error("encode push/pull state", zap.Error(err))
		return nil
	}
	d.stats.StateBytes.Add(uint64(m.Size()))
	d.stats.countSent(m.Bytes, transportPushPull)
	return m.Bytes
}

// MergeRemoteState receives the peer's digest; we answer with what it lacks.
func (d *delegate) MergeRemoteState(b []byte, join bool) {
	if len(b) == 0 {
		return
	}
	(*Cluster)(d).enqueue(slices.Clone(b))
}

// aliveFilter is the Cluster's memberlist.AliveDelegate: it keeps malformed
// members out of memberlist's view. Without gossip encryption anyone who
// reaches the gossip port can send memberlist messages; one with a garbage
// "alive" (no address, inverted protocol versions) used to enter the member
// list and stall joins for everyone ("protocol version (2) is
// incompatible: [1, 0]"). Every Rollcall node publishes readable metadata,
// so a member without it is not one of ours. (Forged but well-formed
// messages are only kept out by encryption: --gossip-key.)
type aliveFilter Cluster

var _ memberlist.AliveDelegate = (*aliveFilter)(nil)

// NotifyAlive refuses a member that no Rollcall node would announce.
func (a *aliveFilter) NotifyAlive(n *memberlist.Node) error {
	if err := checkMember(n); err != nil {
		return err
	}
	return (*Cluster)(a).screenMember(n)
}

// checkMember reports why n cannot be a Rollcall gateway, or nil.
func checkMember(n *memberlist.Node) error {
	switch {
	case n.Name == "":
		return errors.New("member without a name")
	case len(n.Addr) != net.IPv4len && len(n.Addr) != net.IPv6len, n.Addr.IsUnspecified(), n.Port == 0:
		return fmt.Errorf("member %q without a usable address", n.Name)
	case n.PMin > n.PCur || n.PCur > n.PMax || n.DMin > n.DCur || n.DCur > n.DMax:
		return fmt.Errorf("member %q with impossible protocol versions %d..%d (%d), %d..%d (%d)",
			n.Name, n.PMin, n.PMax, n.PCur, n.DMin, n.DMax, n.DCur)
	}
	if bytes.Equal(n.Meta, probeMeta) {
		return fmt.Errorf("%q %s", n.Name, probeRefusal)
	}
	if _, err := dissem.DecodeMeta(n.Meta); err != nil {
		return fmt.Errorf("member %q without Rollcall metadata: %w", n.Name, err)
	}
	return nil
}

// events is the Cluster's memberlist.EventDelegate.
type events Cluster

var _ memberlist.EventDelegate = (*events)(nil)

// memberlist calls these with its node lock held: they copy the node and
// queue the work for the handler goroutine.

func (e *events) NotifyJoin(n *memberlist.Node) {
	c, cp := (*Cluster)(e), *n
	c.queueEvent(func() { c.observeMember(&cp, "alive") })
}

func (e *events) NotifyUpdate(n *memberlist.Node) {
	c, cp := (*Cluster)(e), *n
	c.queueEvent(func() { c.observeMember(&cp, "alive") })
}

func (e *events) NotifyLeave(n *memberlist.Node) {
	c, cp := (*Cluster)(e), *n
	c.queueEvent(func() { c.memberFailed(&cp) })
}

// memberFailed handles a member memberlist declared dead or that left.
// memberlist does not update the State of the Node it hands to
// NotifyLeave; the core knows whether the member announced its leave.
func (c *Cluster) memberFailed(n *memberlist.Node) {
	if n.Name == c.cfg.Name {
		return
	}
	c.step(func(now int64) {
		left := n.State == memberlist.StateLeft
		c.core.MemberFailed(n.Name, left, now)
		state := "dead"
		if p, ok := c.core.Peer(n.Name); ok && p.State == dissem.StateLeft {
			state = "left"
		}
		c.view.set(n, state)
	})
}

// observeMember records a member's metadata; a new incarnation retires the
// sessions of the old one at once.
func (c *Cluster) observeMember(n *memberlist.Node, state string) {
	if n.Name == c.cfg.Name {
		return
	}
	m, err := dissem.DecodeMeta(n.Meta)
	if err != nil {
		c.stats.BadMessages.Add(1)
		c.log.Warn("member with unreadable metadata", zap.String("node", n.Name), zap.Error(err))
	} else {
		c.members.set(n.Name, m)
	}
	wake := false
	c.step(func(now int64) {
		c.view.set(n, state)
		c.core.MemberAlive(n.Name, m, now)
		wake = !c.joined
	})
	if wake {
		select {
		case c.joinWake <- struct{}{}:
		default:
		}
	}
}
