package sim

import (
	"math"

	"github.com/google/btree"
)

// bqueue is memberlist's TransmitLimitedQueue (queue.go of v0.7.0),
// restated over plain values: the same B-tree ordering (transmit tier
// ascending, then message length descending, then id descending), the same
// id generator (reset whenever the queue empties), the same replacement of
// a named broadcast, the same tier-by-tier search in GetBroadcasts and the
// same Prune. It holds the simulator's registry index of each message
// instead of its bytes, so a node's queue is a pointer-free B-tree that the
// garbage collector need not scan and that costs no allocation per
// operation. queue_test.go checks it against memberlist's own queue on
// random operation sequences: the same broadcasts, in the same order.
//
// Only the two kinds of broadcast the simulator queues are supported:
// named ones (a name is a node slot; memberlist's names are "alive/NODE"
// for Rollcall's announcements and NODE for memberlist's messages) and
// UniqueBroadcasts. Finished is a no-op for both, so it is not modelled.
type bqueue struct {
	retransmitMult int
	tq             *btree.BTreeG[qitem]
	named          map[int32]qitem // memberlist's tm: the queued item of each name
	idGen          int64
}

// qitem is memberlist's limitedBroadcast.
type qitem struct {
	id        int64
	transmits int32
	msgLen    int32
	ref       uint32 // Sim.registry index of the message
	name      int32  // node slot naming the broadcast; noName when unique
}

const noName = int32(-1)

// lessQItem is limitedBroadcast.Less.
func lessQItem(b, o qitem) bool {
	if b.transmits != o.transmits {
		return b.transmits < o.transmits
	}
	if b.msgLen != o.msgLen {
		return b.msgLen > o.msgLen
	}
	return b.id > o.id
}

// qFreeList is shared by every queue of a run (a run is single-threaded).
func newBQueue(retransmitMult int, fl *btree.FreeListG[qitem]) *bqueue {
	return &bqueue{retransmitMult: retransmitMult, tq: btree.NewWithFreeListG(32, lessQItem, fl)}
}

// queue is QueueBroadcast of a message of size msgLen registered as ref;
// name is noName for a UniqueBroadcast.
func (q *bqueue) queue(ref uint32, msgLen int, name int32) {
	if q.idGen == math.MaxInt64 {
		q.idGen = 1
	} else {
		q.idGen++
	}
	it := qitem{id: q.idGen, transmits: 0, msgLen: int32(msgLen), ref: ref, name: name}
	if name != noName {
		if old, ok := q.named[name]; ok {
			q.deleteItem(old)
		}
	}
	q.addItem(it)
}

func (q *bqueue) deleteItem(it qitem) {
	q.tq.Delete(it)
	if it.name != noName {
		delete(q.named, it.name)
	}
	if q.tq.Len() == 0 {
		q.idGen = 0
	}
}

func (q *bqueue) addItem(it qitem) {
	q.tq.ReplaceOrInsert(it)
	if it.name != noName {
		if q.named == nil {
			q.named = make(map[int32]qitem)
		}
		q.named[it.name] = it
	}
}

// retransmitLimit is memberlist's retransmitLimit.
func retransmitLimit(retransmitMult, n int) int {
	nodeScale := math.Ceil(math.Log10(float64(n + 1)))
	return retransmitMult * int(nodeScale)
}

// getBroadcasts is GetBroadcasts: it appends to out the registry indexes
// of the messages memberlist would return, in its order. numNodes is what
// NumNodes returns. reinsert is scratch space, returned for reuse.
func (q *bqueue) getBroadcasts(overhead, limit, numNodes int, out []uint32, reinsert []qitem) ([]uint32, []qitem) {
	if q.tq.Len() == 0 {
		return out, reinsert
	}
	transmitLimit := retransmitLimit(q.retransmitMult, numNodes)
	bytesUsed := 0
	reinsert = reinsert[:0]
	minItem, _ := q.tq.Min()
	maxItem, _ := q.tq.Max()
	for transmits := minItem.transmits; transmits <= maxItem.transmits; {
		free := int64(limit - bytesUsed - overhead)
		if free <= 0 {
			break
		}
		// The least item of the tier that fits: memberlist's AscendRange
		// from {transmits, free, MaxInt64} to {transmits+1, MaxInt64,
		// MaxInt64}. Every item of the range fits. (A free above MaxInt32
		// exceeds every length, as MaxInt32 does.)
		var keep qitem
		found := false
		ge := qitem{transmits: transmits, msgLen: int32(min(free, math.MaxInt32)), id: math.MaxInt64}
		q.tq.AscendGreaterOrEqual(ge, func(it qitem) bool {
			keep, found = it, true
			return false
		})
		if !found {
			break // no item of this tier fits, and every later tier is empty
		}
		if keep.transmits != transmits {
			// Nothing of this tier fits, and keep is the first item of the
			// next tier that holds any: memberlist would search the empty
			// tiers between in vain, then this one.
			transmits = keep.transmits
			continue
		}
		bytesUsed += overhead + int(keep.msgLen)
		out = append(out, keep.ref)
		q.deleteItem(keep)
		if int(keep.transmits)+1 < transmitLimit {
			keep.transmits++
			reinsert = append(reinsert, keep)
		}
	}
	for _, it := range reinsert {
		q.addItem(it)
	}
	return out, reinsert
}

// numQueued is NumQueued.
func (q *bqueue) numQueued() int { return q.tq.Len() }

// prune is Prune: drop the greatest items (most transmitted, smallest,
// oldest) until at most maxRetain remain.
func (q *bqueue) prune(maxRetain int) {
	for q.tq.Len() > maxRetain {
		it, ok := q.tq.Max()
		if !ok {
			break
		}
		q.deleteItem(it)
	}
}
