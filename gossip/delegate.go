package gossip

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/vmihailenco/msgpack/v5"
	"go.uber.org/zap"
)

// delegate is the Cluster's memberlist.Delegate. memberlist calls it from
// its own goroutines; every method must be quick and thread-safe.
type delegate Cluster

var _ memberlist.Delegate = (*delegate)(nil)

// meta is the node metadata memberlist carries: [incarnation, client_addr].
type meta struct {
	Incarnation uint64
	ClientAddr  string
}

func encodeMeta(m meta) []byte {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	_ = enc.EncodeArrayLen(2)
	_ = enc.EncodeUint(m.Incarnation)
	_ = enc.EncodeString(m.ClientAddr)
	return buf.Bytes()
}

func decodeMeta(b []byte) (meta, error) {
	fd := newFieldDecoder(b, 2)
	m := meta{Incarnation: fd.u64(), ClientAddr: fd.str(512)}
	return m, fd.done()
}

func (d *delegate) NodeMeta(limit int) []byte {
	b := encodeMeta(meta{Incarnation: d.cfg.Incarnation, ClientAddr: d.cfg.ClientAddr})
	if len(b) > limit {
		return encodeMeta(meta{Incarnation: d.cfg.Incarnation})
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
	b, err := encodeDigestMsg(msgState, digestMsg{From: d.cfg.Name, Digest: d.host.Digest()})
	if err != nil {
		d.log.Error("encode push/pull state", zap.Error(err))
		return nil
	}
	d.stats.StateBytes.Add(uint64(len(b)))
	d.stats.countSent(b, transportPushPull)
	return b
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
	return checkMember(n)
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
	if _, err := decodeMeta(n.Meta); err != nil {
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
func (c *Cluster) memberFailed(n *memberlist.Node) {
	if n.Name == c.cfg.Name {
		return
	}
	mode := ChooseMode(c.ml.NumMembers(), c.cfg.EagerThreshold)
	c.mu.Lock()
	p := c.peerLocked(n.Name)
	// memberlist does not update the State of the Node it hands to
	// NotifyLeave; the leave intent says whether this was a graceful leave.
	state := "dead"
	if p.leaving || n.State == memberlist.StateLeft {
		state = "left"
	}
	p.state, p.deadSince = state, c.cfg.Now()
	if p.addr == "" {
		p.addr = n.Address()
	}
	// A graceful leave is the peer's own word: it always counts. A dead
	// verdict is overruled by proof of life heard since (VerdictOverrule).
	var overrule time.Duration
	if state == "dead" {
		overrule = VerdictOverrule(mode, c.cfg.AliveInterval)
	}
	wasUp := c.leases.Fail(n.Name, c.leaseNow(), overrule)
	down := c.leases.Down(n.Name)
	if down {
		delete(c.reviving, n.Name)
	}
	c.mu.Unlock()
	switch {
	case wasUp:
		if state == "left" {
			c.stats.MembersLeft.Add(1)
		} else {
			c.stats.MembersFailed.Add(1)
		}
		c.log.Info("member failed or left; its sessions are shown expired", zap.String("node", n.Name), zap.String("state", state))
		c.host.MarkNodeDown(n.Name)
	case !down:
		c.log.Info("member declared dead but heard from since; its sessions stay shown", zap.String("node", n.Name))
	}
}

// observeMember records a member's metadata; a new incarnation retires the
// sessions of the old one at once.
func (c *Cluster) observeMember(n *memberlist.Node, state string) {
	if n.Name == c.cfg.Name {
		return
	}
	m, err := decodeMeta(n.Meta)
	if err != nil {
		c.stats.BadMessages.Add(1)
		c.log.Warn("member with unreadable metadata", zap.String("node", n.Name), zap.Error(err))
	}
	c.mu.Lock()
	p := c.peerLocked(n.Name)
	newInc := m.Incarnation > p.incarnation
	p.incarnation = max(p.incarnation, m.Incarnation)
	if m.ClientAddr != "" {
		p.clientAddr = m.ClientAddr
	}
	p.addr, p.state, p.node = n.Address(), state, n
	p.leaving = false
	c.leases.Begin(n.Name, c.leaseNow())
	wake := !c.joined
	c.mu.Unlock()
	if wake {
		select {
		case c.joinWake <- struct{}{}:
		default:
		}
	}
	if newInc {
		c.retire(originOf(n.Name, m.Incarnation))
	}
}

// namedBroadcast is a piggybacked message that replaces older ones of the
// same name (an origin's alive announcement).
type namedBroadcast struct {
	msg  []byte
	name string
}

var _ memberlist.NamedBroadcast = (*namedBroadcast)(nil)

func (b *namedBroadcast) Invalidates(other memberlist.Broadcast) bool {
	o, ok := other.(*namedBroadcast)
	return ok && o.name == b.name
}

func (b *namedBroadcast) Name() string    { return b.name }
func (b *namedBroadcast) Message() []byte { return b.msg }
func (b *namedBroadcast) Finished()       {}

// uniqueBroadcast is a piggybacked delta batch. It invalidates nothing, and
// says so (memberlist.UniqueBroadcast), so queueing it does not scan the
// whole queue for something to replace.
type uniqueBroadcast struct{ msg []byte }

var _ memberlist.UniqueBroadcast = (*uniqueBroadcast)(nil)

func (b *uniqueBroadcast) Invalidates(memberlist.Broadcast) bool { return false }
func (b *uniqueBroadcast) UniqueBroadcast()                      {}
func (b *uniqueBroadcast) Message() []byte                       { return b.msg }
func (b *uniqueBroadcast) Finished()                             {}
