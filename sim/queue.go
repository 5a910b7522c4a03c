package sim

import (
	"math"
	"slices"
)

// bqueue is memberlist's TransmitLimitedQueue (queue.go of v0.7.0),
// restated over plain values. memberlist keeps its broadcasts in one B-tree
// ordered by transmit tier ascending, then message length descending, then
// id descending; bqueue keeps the same order as tiers of length buckets of
// ids, and does what memberlist does with it: the same id generator (reset
// whenever the queue empties), the same replacement of a named broadcast
// (and of an item whose key equals another's, as the B-tree's
// ReplaceOrInsert does), the same tier-by-tier search in GetBroadcasts and
// the same Prune. It holds the simulator's registry index of each message
// instead of its bytes. A node's queue is then a few pointer-free slices
// that the garbage collector need not scan, whose operations allocate
// nothing in steady state, and where the search for the largest message
// that fits is a look at a handful of buckets rather than a descent of a
// 4,096-item tree. queue_test.go checks it against memberlist's own queue
// on random operation sequences: the same broadcasts, in the same order.
//
// Only the two kinds of broadcast the simulator queues are supported:
// named ones (a name is a node slot; memberlist's names are "alive/NODE"
// for Rollcall's announcements and NODE for memberlist's messages) and
// UniqueBroadcasts (gossip's delta batches are unnamed, for which
// memberlist scans the whole queue on every enqueue and never finds
// anything to invalidate, since every queued message is named or unique:
// declaring them unique gives the same queue without the scan). Finished
// is a no-op for both, so it is not modelled.
type bqueue struct {
	retransmitMult int
	tiers          []qtier         // by transmit count
	n              int             // items queued
	named          map[int32]qitem // memberlist's tm: the queued item of each name
	idGen          int64
	spare          [][]qent // buffers of emptied buckets, for reuse
}

// qtier holds the items of one transmit count, in buckets by message
// length, longest first.
type qtier struct {
	n       int
	buckets []qbucket
}

// qbucket holds the items of one tier and length, by id ascending (so in
// memberlist's order from the last to the first): buf[lo:]. Prune takes
// from the front and GetBroadcasts from the back, so the front is a
// deque's, reclaimed when the buffer is full instead of growing it.
type qbucket struct {
	msgLen int32
	lo     int
	buf    []qent
}

// items returns the bucket's items, by id ascending.
func (b *qbucket) items() []qent { return b.buf[b.lo:] }

// remove deletes the i-th item.
func (b *qbucket) remove(i int) {
	switch n := len(b.buf) - b.lo; {
	case n == 1:
		b.buf, b.lo = b.buf[:0], 0
	case i == 0:
		b.lo++ // Prune's oldest: no copy
	case i == n-1:
		b.buf = b.buf[:len(b.buf)-1] // GetBroadcasts' newest
	default:
		b.buf = slices.Delete(b.buf, b.lo+i, b.lo+i+1)
	}
}

// insert puts e at index i, first reclaiming the front when the buffer is
// full.
func (b *qbucket) insert(i int, e qent) {
	if len(b.buf) == cap(b.buf) && b.lo > 0 {
		n := copy(b.buf, b.buf[b.lo:])
		b.buf, b.lo = b.buf[:n], 0
	}
	b.buf = slices.Insert(b.buf, b.lo+i, e)
}

type qent struct {
	id   int64
	ref  uint32 // Sim.registry index of the message
	name int32  // node slot naming the broadcast; noName when unique
}

// qitem is memberlist's limitedBroadcast.
type qitem struct {
	id        int64
	transmits int32
	msgLen    int32
	ref       uint32
	name      int32
}

const noName = int32(-1)

func newBQueue(retransmitMult int) *bqueue {
	return &bqueue{retransmitMult: retransmitMult}
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

// bucket finds tier t's bucket of length l: its index, and whether it
// exists (else where it goes).
func (q *bqueue) bucket(t, l int32) (int, bool) {
	if int(t) >= len(q.tiers) {
		return 0, false
	}
	return slices.BinarySearchFunc(q.tiers[t].buckets, l, func(b qbucket, l int32) int {
		switch {
		case b.msgLen > l:
			return -1
		case b.msgLen < l:
			return 1
		}
		return 0
	})
}

// removeAt removes item i of bucket bi of tier t, and the bucket when it
// empties (keeping its buffer for the next new bucket). It is the B-tree's
// Delete of that item; the caller handles the name index.
func (q *bqueue) removeAt(t int32, bi, i int) {
	tr := &q.tiers[t]
	b := &tr.buckets[bi]
	b.remove(i)
	if len(b.buf) == 0 {
		q.spare = append(q.spare, b.buf)
		tr.buckets = slices.Delete(tr.buckets, bi, bi+1)
	}
	tr.n--
	q.n--
	if q.n == 0 {
		q.idGen = 0
	}
}

// deleteItem is memberlist's deleteItem: the B-tree's Delete removes the
// item whose key (tier, length, id) equals it's, if any.
func (q *bqueue) deleteItem(it qitem) {
	if bi, ok := q.bucket(it.transmits, it.msgLen); ok {
		b := &q.tiers[it.transmits].buckets[bi]
		if i, ok := slices.BinarySearchFunc(b.items(), it.id, cmpQEnt); ok {
			q.removeAt(it.transmits, bi, i)
		}
	}
	if it.name != noName {
		delete(q.named, it.name)
	}
	if q.n == 0 {
		q.idGen = 0
	}
}

func cmpQEnt(e qent, id int64) int {
	switch {
	case e.id < id:
		return -1
	case e.id > id:
		return 1
	}
	return 0
}

// addItem is memberlist's addItem (ReplaceOrInsert: an item with an equal
// key is replaced).
func (q *bqueue) addItem(it qitem) {
	if int(it.transmits) >= len(q.tiers) {
		q.tiers = append(q.tiers, make([]qtier, int(it.transmits)+1-len(q.tiers))...)
	}
	tr := &q.tiers[it.transmits]
	bi, ok := q.bucket(it.transmits, it.msgLen)
	if !ok {
		var buf []qent
		if n := len(q.spare); n > 0 {
			buf, q.spare = q.spare[n-1], q.spare[:n-1]
		}
		tr.buckets = slices.Insert(tr.buckets, bi, qbucket{msgLen: it.msgLen, buf: buf})
	}
	b := &tr.buckets[bi]
	e := qent{id: it.id, ref: it.ref, name: it.name}
	if n := len(b.buf); n == b.lo || b.buf[n-1].id < it.id {
		// The newest of its bucket, as a new broadcast and most
		// retransmitted ones are: an append, without a search.
		b.insert(n-b.lo, e)
		tr.n++
		q.n++
	} else if i, ok := slices.BinarySearchFunc(b.items(), it.id, cmpQEnt); ok {
		b.buf[b.lo+i] = e
	} else {
		b.insert(i, e)
		tr.n++
		q.n++
	}
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

// transmitRange is getTransmitRange: the tiers of the least and the
// greatest item.
func (q *bqueue) transmitRange() (lo, hi int32) {
	lo, hi = -1, -1
	for t := range q.tiers {
		if q.tiers[t].n > 0 {
			if lo < 0 {
				lo = int32(t)
			}
			hi = int32(t)
		}
	}
	return lo, hi
}

// getBroadcasts is GetBroadcasts: it appends to out the registry indexes
// of the messages memberlist would return, in its order. numNodes is what
// NumNodes returns. reinsert is scratch space, returned for reuse.
func (q *bqueue) getBroadcasts(overhead, limit, numNodes int, out []uint32, reinsert []qitem) ([]uint32, []qitem) {
	if q.n == 0 {
		return out, reinsert
	}
	transmitLimit := retransmitLimit(q.retransmitMult, numNodes)
	bytesUsed := 0
	reinsert = reinsert[:0]
	minTr, maxTr := q.transmitRange()
	for transmits := minTr; transmits <= maxTr; {
		free := int64(limit - bytesUsed - overhead)
		if free <= 0 {
			break
		}
		// The least item of the tier that fits: the highest id of its
		// longest bucket not longer than free. Empty buckets are removed,
		// so the first that fits is it.
		bi := -1
		tr := &q.tiers[transmits]
		for i := range tr.buckets {
			if int64(tr.buckets[i].msgLen) <= free {
				bi = i
				break
			}
		}
		if bi < 0 {
			transmits++
			continue
		}
		b := &tr.buckets[bi]
		e := b.buf[len(b.buf)-1]
		keep := qitem{id: e.id, transmits: transmits, msgLen: b.msgLen, ref: e.ref, name: e.name}
		bytesUsed += overhead + int(keep.msgLen)
		out = append(out, keep.ref)
		q.removeAt(transmits, bi, len(b.buf)-1-b.lo)
		if keep.name != noName {
			delete(q.named, keep.name)
		}
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
func (q *bqueue) numQueued() int { return q.n }

// prune is Prune: drop the greatest items (most transmitted, shortest,
// oldest) until at most maxRetain remain.
func (q *bqueue) prune(maxRetain int) {
	for q.n > maxRetain {
		_, hi := q.transmitRange()
		tr := &q.tiers[hi]
		b := &tr.buckets[len(tr.buckets)-1] // empty buckets are removed
		e := b.buf[b.lo]
		q.deleteItem(qitem{id: e.id, transmits: hi, msgLen: b.msgLen, ref: e.ref, name: e.name})
	}
}
