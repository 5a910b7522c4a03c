package gossip

// Bounds on the values peers send. A decoded message is well formed
// (dissem.Decode and crdt's Validate check shapes); this file checks that
// its values are ones an honest gateway could have sent, before the core or
// the replica sees them. Without gossip encryption anyone who reaches the
// gossip port can send any message, and one value out of range could do
// lasting harm: an incarnation of 2^64-1 retires every session of the
// gateway it names, for good; a version of 2^64-1 freezes an origin's
// watermark; an epoch of 2^64-1 locks a device out; a client address in an
// announcement sends draining clients, with their tokens, elsewhere.
//
//	incarnation   an origin's incarnation (alive announcements, member
//	              metadata, the origins of deltas and syncs) at most
//	              Config.MaxIncarnationSkew past this node's clock:
//	              incarnations are boot times in Unix nanoseconds
//	stamp         an account record's hybrid-logical-clock wall time and a
//	              last-seen time, the same bound (they are wall clock
//	              readings too): a last seen at the end of time would win
//	              the user's register for ever
//	version       versions, since, sequence numbers and watermarks at most
//	              crdt.MaxIssuedEpoch (2^53-1): an origin's counters grow
//	              by one a write and never get near it, and event versions
//	              reach JSON clients, which hold integers exactly to there
//	epoch         session epochs at most crdt.MaxIssuedEpoch, the largest
//	              an owner issues
//	client_addr   the client address of a member is its own word: its
//	              memberlist metadata. An announcement naming another
//	              address for the same incarnation is refused, and the
//	              address an announcement carries is never taken over the
//	              metadata's
//
// What is refused is counted (Stats.Refusals, by reason) and logged at warn
// level at most once per reason every refusalLogInterval. A delta batch or
// an announcement with a value out of bounds is refused whole (an honest
// batch holds one origin's writes); an anti-entropy answer loses only the
// origins that hold one, so the records of the others still merge.
// Refusing never changes a record this node holds.

import (
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
	"go.uber.org/zap"

	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/dissem"
)

// DefaultMaxIncarnationSkew is Config.MaxIncarnationSkew's default.
const DefaultMaxIncarnationSkew = time.Hour

// maxPeerCounter bounds versions, sequence numbers, watermarks and epochs
// from peers: the largest epoch an owner issues, which is also the largest
// integer a JSON client holds exactly.
const maxPeerCounter = crdt.MaxIssuedEpoch

// refusalLogInterval is how often each reason of refusal is logged at most.
const refusalLogInterval = 10 * time.Second

// refusal is why a peer's value was refused.
type refusal uint8

const (
	refusedIncarnation refusal = iota
	refusedStamp
	refusedVersion
	refusedEpoch
	refusedClientAddr
	numRefusals
)

func (r refusal) String() string {
	return [...]string{"incarnation", "stamp", "version", "epoch", "client_addr"}[r]
}

// refusedError is a value out of bounds, and why.
type refusedError struct {
	reason refusal
	err    error
}

func (e *refusedError) Error() string { return outOfBounds + e.err.Error() }

// outOfBounds starts every refusal's text; memberlist logs the alive
// filter's errors, and its lines about refusals are turned down to debug
// (zapWriter): the refusal is logged here, rate-limited.
const outOfBounds = "out of bounds: "

func refuse(reason refusal, format string, args ...any) error {
	return &refusedError{reason: reason, err: fmt.Errorf(format, args...)}
}

// Refusal is how many peer values of one kind this node refused.
type Refusal struct {
	Reason string // incarnation, stamp, version, epoch or client_addr
	Count  uint64
}

// Refusals returns the values peers sent that this node refused, by
// reason, zeros included.
func (s *Stats) Refusals() []Refusal {
	out := make([]Refusal, numRefusals)
	for r := range numRefusals {
		out[r] = Refusal{Reason: r.String(), Count: s.refused[r].Load()}
	}
	return out
}

// bounds are the limits peer values are checked against at one moment.
type bounds struct {
	// future is the largest incarnation or clock reading accepted: this
	// node's clock plus the skew, in Unix nanoseconds
	future uint64
}

func (c *Cluster) bounds() bounds {
	now := c.cfg.Now().UnixNano()
	skew := int64(c.cfg.MaxIncarnationSkew)
	if now < 0 {
		now = 0
	}
	f := uint64(math.MaxInt64)
	if now <= math.MaxInt64-skew {
		f = uint64(now + skew)
	}
	return bounds{future: f}
}

func (b bounds) origin(o crdt.Origin) error {
	if o.Incarnation > b.future {
		return refuse(refusedIncarnation, "origin %s: incarnation more than the allowed skew past this node's clock", o)
	}
	return nil
}

func counter(what string, v uint64) error {
	if v > maxPeerCounter {
		return refuse(refusedVersion, "%s %d above %d", what, v, uint64(maxPeerCounter))
	}
	return nil
}

func (b bounds) session(s *crdt.Session) error {
	if err := b.origin(s.Origin); err != nil {
		return err
	}
	if s.Epoch > maxPeerCounter {
		return refuse(refusedEpoch, "session %s of %s: epoch %d above %d", s.Key(), s.Origin, s.Epoch, uint64(maxPeerCounter))
	}
	if err := counter("version", s.Version); err != nil {
		return err
	}
	return counter("sequence number", s.Seq)
}

func (b bounds) account(a *crdt.Account) error {
	if err := b.origin(a.Origin); err != nil {
		return err
	}
	if a.Stamp.Wall < 0 || uint64(a.Stamp.Wall) > b.future {
		return refuse(refusedStamp, "account %q of %s: clock stamp more than the allowed skew past this node's clock", a.User, a.Origin)
	}
	return counter("version", a.Version)
}

func (b bounds) lastSeen(ls *crdt.LastSeen) error {
	if err := b.origin(ls.Origin); err != nil {
		return err
	}
	if ls.At < 0 || uint64(ls.At) > b.future {
		return refuse(refusedStamp, "last seen of %q of %s: time more than the allowed skew past this node's clock", ls.User, ls.Origin)
	}
	return counter("version", ls.Version)
}

func (b bounds) delta(d *crdt.Delta) error {
	if err := counter("since", d.Since); err != nil {
		return err
	}
	if d.Session != nil {
		return b.session(d.Session)
	}
	if d.Account != nil {
		return b.account(d.Account)
	}
	if d.LastSeen != nil {
		return b.lastSeen(d.LastSeen)
	}
	return nil
}

// originSync checks one origin's part of an anti-entropy answer.
func (b bounds) originSync(os *crdt.OriginSync) error {
	if err := b.origin(os.Origin); err != nil {
		return err
	}
	if err := counter("watermark", os.Watermark); err != nil {
		return err
	}
	if err := counter("GC floor", os.GCFloor); err != nil {
		return err
	}
	if d := os.Drop; d != nil {
		// Its kept runs lie within it (crdt's Validate).
		if err := counter("drop range", d.Through); err != nil {
			return err
		}
	}
	for i := range os.Sessions {
		if err := b.session(&os.Sessions[i]); err != nil {
			return err
		}
	}
	for i := range os.Accounts {
		if err := b.account(&os.Accounts[i]); err != nil {
			return err
		}
	}
	for i := range os.LastSeen {
		if err := b.lastSeen(&os.LastSeen[i]); err != nil {
			return err
		}
	}
	return nil
}

func (b bounds) cursor(c crdt.PageCursor) error {
	if !c.Started {
		return nil
	}
	if err := b.origin(c.Origin); err != nil {
		return err
	}
	return counter("page cursor", c.After)
}

// screen checks a decoded message against the bounds and returns what of
// it may be stepped: m itself, a copy without what was refused, or nil
// when nothing of it may. Each refusal is counted and logged.
func (c *Cluster) screen(m *dissem.Message) *dissem.Message {
	b := c.bounds()
	switch m.Type {
	case dissem.TypeRegionAlive:
		for _, n := range m.Region.Nodes {
			err := b.origin(crdt.Origin{Node: n.Node, Incarnation: n.Incarnation})
			if err == nil {
				err = counter("watermark", n.Watermark)
			}
			if err == nil && n.ClientAddr != "" {
				if err = checkHostPort(n.ClientAddr); err != nil {
					err = refuse(refusedClientAddr, "region gateway %q: client address %q: %v", n.Node, n.ClientAddr, err)
				}
			}
			if err != nil {
				c.refused(err, "a region's announcement")
				return nil
			}
		}
	case dissem.TypeDeltas, dissem.TypeRegionDeltas:
		for i := range m.Deltas {
			if err := b.delta(&m.Deltas[i]); err != nil {
				c.refused(err, "a delta batch")
				return nil
			}
		}
	case dissem.TypeAlive, dissem.TypeLeaving, dissem.TypeListed:
		a := m.Alive
		err := b.origin(a.Origin)
		if err == nil {
			err = counter("watermark", a.Watermark)
		}
		if err == nil {
			a.ClientAddr, err = c.memberClientAddr(a)
		}
		if err != nil {
			c.refused(err, "an announcement")
			return nil
		}
		if a.ClientAddr != m.Alive.ClientAddr {
			cp := *m
			cp.Alive = a
			return &cp
		}
	case dissem.TypeSync, dissem.TypeSyncPage, dissem.TypeRegionSync:
		if m.Type == dissem.TypeSyncPage {
			for _, cur := range []crdt.PageCursor{m.Page.At, m.Page.Next} {
				if err := b.cursor(cur); err != nil {
					c.refused(err, "a page of an anti-entropy answer")
					return nil
				}
			}
		}
		var keep crdt.Sync
		for i := range m.Sync {
			err := b.originSync(&m.Sync[i])
			if err == nil {
				if keep != nil {
					keep = append(keep, m.Sync[i])
				}
				continue
			}
			c.refused(err, "an origin of an anti-entropy answer")
			if keep == nil {
				keep = append(make(crdt.Sync, 0, len(m.Sync)-1), m.Sync[:i]...)
			}
		}
		switch {
		case keep == nil:
		case len(keep) == 0 && m.Type == dissem.TypeSync:
			return nil // nothing left to apply (a page still moves its transfer on)
		default:
			cp := *m
			cp.Sync = keep
			return &cp
		}
	case dissem.TypePullPage:
		if err := b.cursor(m.Digest.Cursor); err != nil {
			c.refused(err, "a page pull")
			return nil
		}
	}
	return m
}

// memberClientAddr returns the client address an announcement may carry:
// the one in its member's memberlist metadata, which is the member's own
// word. An announcement of the incarnation the metadata describes that
// names another address is refused. One of another incarnation (a restart
// memberlist has not reported yet), or of a node memberlist does not list,
// carries none: the metadata brings it.
func (c *Cluster) memberClientAddr(a dissem.Alive) (string, error) {
	c.mu.Lock()
	n := c.view.node(a.Origin.Node)
	var meta []byte
	if n != nil {
		meta = n.Meta
	}
	c.mu.Unlock()
	if n == nil {
		return "", nil
	}
	m, err := dissem.DecodeMeta(meta)
	if err != nil {
		return "", nil
	}
	if m.Incarnation == a.Origin.Incarnation && m.ClientAddr != "" && a.ClientAddr != m.ClientAddr {
		return "", refuse(refusedClientAddr, "announcement of %s names client address %q; its metadata says %q",
			a.Origin, a.ClientAddr, m.ClientAddr)
	}
	return m.ClientAddr, nil
}

// screenMember checks what a memberlist member's metadata says: its
// incarnation within the bounds, and a client address that is a
// host:port and, for an incarnation already reported, the one it
// published then. Called by the alive filter, with memberlist's lock held.
func (c *Cluster) screenMember(n *memberlist.Node) error {
	m, err := dissem.DecodeMeta(n.Meta)
	if err != nil {
		return err
	}
	err = c.bounds().origin(crdt.Origin{Node: n.Name, Incarnation: m.Incarnation})
	if err == nil && m.ClientAddr != "" {
		if err = checkHostPort(m.ClientAddr); err != nil {
			err = refuse(refusedClientAddr, "member %q: client address %q: %v", n.Name, m.ClientAddr, err)
		}
	}
	if prev, ok := c.members.get(n.Name); err == nil && ok && prev.Incarnation == m.Incarnation && prev.ClientAddr != m.ClientAddr {
		// A gateway's client address is settled at its start: only a new
		// incarnation may publish another.
		err = refuse(refusedClientAddr, "member %q, incarnation %d: client address %q; it published %q",
			n.Name, m.Incarnation, m.ClientAddr, prev.ClientAddr)
	}
	if err != nil {
		c.refused(err, "a member's metadata")
	}
	return err
}

// memberBook holds the metadata of each member memberlist reported, by
// name. It takes a lock of its own, a leaf: the alive filter reads it
// with memberlist's lock held.
type memberBook struct {
	mu   sync.Mutex
	meta map[string]dissem.Meta
}

func (b *memberBook) set(name string, m dissem.Meta) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.meta == nil {
		b.meta = make(map[string]dissem.Meta)
	}
	b.meta[name] = m
}

func (b *memberBook) get(name string) (dissem.Meta, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	m, ok := b.meta[name]
	return m, ok
}

// checkHostPort reports whether addr is host:port with a host and a port
// in 1..65535.
func checkHostPort(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 || host == "" {
		return errors.New("not a host and a port")
	}
	return nil
}

// refused counts a refusal and logs it, at most once per reason every
// refusalLogInterval.
func (c *Cluster) refused(err error, what string) {
	var re *refusedError
	if !errors.As(err, &re) {
		c.stats.BadMessages.Add(1)
		return
	}
	c.stats.refused[re.reason].Add(1)
	if n, ok := c.stats.refusalLog.allow(re.reason, c.cfg.Now()); ok {
		c.log.Warn("refused a value from a peer: out of bounds (a hostile or broken sender; see docs/operations/security.md)",
			zap.String("in", what), zap.Stringer("reason", re.reason), zap.Int("unlogged_since_last", n), zap.Error(err))
	}
}

// refusalLog rate-limits the logging of refusals, per reason.
type refusalLog struct {
	mu     sync.Mutex
	last   [numRefusals]time.Time
	quiet  [numRefusals]int // refusals not logged since the last line
	logged [numRefusals]bool
}

// allow reports whether a refusal for reason may be logged at now, and how
// many were not since the last that was.
func (l *refusalLog) allow(r refusal, now time.Time) (int, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.logged[r] && now.Sub(l.last[r]) < refusalLogInterval {
		l.quiet[r]++
		return 0, false
	}
	n := l.quiet[r]
	l.last[r], l.logged[r], l.quiet[r] = now, true, 0
	return n, true
}
