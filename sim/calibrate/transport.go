package calibrate

import (
	"encoding/binary"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/rollcall/rollcall/crdt"
)

// sendLog records, while on, when each node starts sending a packet that
// carries its own writes: the warm-up splits a write's delay at its owner's
// first packet.
type sendLog struct {
	on    atomic.Bool
	mu    sync.Mutex
	sends map[int][]sent // by node, in order
}

// sent is one packet: when its sending started, and the highest version of
// the sender's own deltas in it (a packet of relayed deltas from others,
// in epidemic mode, is not logged).
type sent struct {
	at      time.Time
	version uint64
}

func (l *sendLog) record(node int, s sent) {
	l.mu.Lock()
	l.sends[node] = append(l.sends[node], s)
	l.mu.Unlock()
}

// first returns when node started sending the first packet, at or after t,
// with its own write of version v or a later one (a later write's flush
// carries v too, coalesced).
func (l *sendLog) first(node int, t time.Time, v uint64) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ss := l.sends[node]
	for i := sort.Search(len(ss), func(i int) bool { return !ss[i].at.Before(t) }); i < len(ss); i++ {
		if ss[i].version >= v {
			return ss[i].at, true
		}
	}
	return time.Time{}, false
}

// countingTransport counts the session deltas in every UDP packet a node
// sends, piggybacked ones included, by reading memberlist's framing (CRC
// header, compound messages, user messages) and gossip's (version, type,
// crdt deltas). During the warm-up it also logs when node (called name)
// starts sending a packet with its own writes.
type countingTransport struct {
	memberlist.NodeAwareTransport
	copies *atomic.Uint64
	node   int
	name   string
	sends  *sendLog
	log    *copyLog
}

func (t *countingTransport) count(b []byte, to string) {
	at := time.Now()
	ds := packetDeltas(b, nil)
	t.copies.Add(uint64(len(ds)))
	t.log.record(t.name, to, ds)
	if len(ds) == 0 || !t.sends.on.Load() {
		return
	}
	var own uint64
	for i := range ds {
		if ds[i].Origin().Node == t.name {
			own = max(own, ds[i].Version())
		}
	}
	if own > 0 {
		t.sends.record(t.node, sent{at: at, version: own})
	}
}

// memberlist message types (net.go).
const (
	mlCompound = 7
	mlUser     = 8
	mlHasCRC   = 12
	rcDeltas   = 1 // gossip's msgDeltas
)

func (t *countingTransport) WriteToAddress(b []byte, addr memberlist.Address) (time.Time, error) {
	t.count(b, addr.Addr)
	return t.NodeAwareTransport.WriteToAddress(b, addr)
}

func (t *countingTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	t.count(b, addr)
	return t.NodeAwareTransport.WriteTo(b, addr)
}

// packetDeltas appends the session deltas in packet b to out.
func packetDeltas(b []byte, out []crdt.Delta) []crdt.Delta {
	if len(b) >= 5 && b[0] == mlHasCRC {
		b = b[5:]
	}
	if len(b) == 0 {
		return out
	}
	switch b[0] {
	case mlUser:
		if len(b) < 3 || b[2] != rcDeltas {
			return out
		}
		ds, err := crdt.DecodeDeltas(b[3:])
		if err != nil {
			return out
		}
		return append(out, ds...)
	case mlCompound:
		if len(b) < 2 {
			return out
		}
		parts := int(b[1])
		lens := b[2:]
		if len(lens) < 2*parts {
			return out
		}
		body := lens[2*parts:]
		for i := range parts {
			l := int(binary.BigEndian.Uint16(lens[2*i:]))
			if l > len(body) {
				return out
			}
			out = packetDeltas(body[:l], out)
			body = body[l:]
		}
	}
	return out
}

// copyLog records every delta copy a node sends over UDP, by sender,
// delta and destination, for the copy audit (copyAudit).
type copyLog struct {
	mu     sync.Mutex
	copies map[copyKey]int // how many times
}

type copyKey struct {
	delta   deltaID
	sender  string
	to      string // the destination's address
	relayed bool   // sender is not the delta's origin
}

// deltaID names one delta: its origin node and version.
type deltaID struct {
	origin  string
	version uint64
}

func (l *copyLog) record(name, to string, ds []crdt.Delta) {
	if len(ds) == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.copies == nil {
		l.copies = make(map[copyKey]int)
	}
	for i := range ds {
		o := ds[i].Origin().Node
		l.copies[copyKey{delta: deltaID{o, ds[i].Version()}, sender: name, to: to, relayed: o != name}]++
	}
}

// copyAudit is what the copy log and gossip's own counters say about the
// delta copies sent over UDP up to some point of a run. Unlike the copies
// per change, which depend on how many writes a batch coalesced, these are
// counts the protocol fixes (see the test's use of them).
type copyAudit struct {
	// Deltas is the number of distinct deltas their owners sent; Own the
	// copies of them the owners sent, Relayed those other nodes sent.
	Deltas       int
	Own, Relayed int
	// Repeats counts copies of a delta an owner sent to a peer it had
	// already sent it to.
	Repeats int
	// MinPeers and MaxPeers are the fewest and most distinct peers an
	// owner sent one of its deltas to.
	MinPeers, MaxPeers int
	// Direct is gossip's Stats.DeltaCopies summed over the nodes: the
	// copies its flushes sent directly (eager fan-out or epidemic seeds).
	Direct uint64
	// Disturbed counts what lets a flush send to fewer peers, or a copy go
	// uncounted: leases expired, members failed and send errors, summed
	// over the nodes' gossip.Stats.
	Disturbed uint64
}

// audit sums the copy log and the nodes' gossip counters.
func (rr *realRun) audit() copyAudit {
	var a copyAudit
	for _, c := range rr.nodes {
		if c == nil {
			continue
		}
		st := c.Stats()
		a.Direct += st.DeltaCopies.Load()
		a.Disturbed += st.LeasesExpired.Load() + st.MembersFailed.Load() + st.SendErrors.Load()
	}
	l := &rr.log
	l.mu.Lock()
	defer l.mu.Unlock()
	peers := make(map[deltaID]int)
	for k, n := range l.copies {
		if k.relayed {
			a.Relayed += n
			continue
		}
		a.Own += n
		a.Repeats += n - 1
		peers[k.delta]++
	}
	a.Deltas = len(peers)
	first := true
	for _, p := range peers {
		if first || p < a.MinPeers {
			a.MinPeers = p
		}
		a.MaxPeers = max(a.MaxPeers, p)
		first = false
	}
	return a
}
