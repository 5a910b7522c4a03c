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
}

func (t *countingTransport) count(b []byte) {
	at := time.Now()
	ds := packetDeltas(b, nil)
	t.copies.Add(uint64(len(ds)))
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
	t.count(b)
	return t.NodeAwareTransport.WriteToAddress(b, addr)
}

func (t *countingTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	t.count(b)
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
