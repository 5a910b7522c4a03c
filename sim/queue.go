package sim

import (
	"math"
	"math/bits"
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
// instead of its bytes. A node's queue is then a few slices whose items
// are pointer-free (the garbage collector need not scan them), whose
// operations allocate nothing in steady state (bucket buffers come from
// and go back to a pool the Sim's queues share), and where the search for
// the largest message that fits is a look at a handful of bucket headers
// rather than a descent of a 4,096-item tree. queue_test.go checks it against memberlist's own queue
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
	tiers          []qtier        // by transmit count
	width          int            // bucket slots per tier
	slots          []qbucket      // tier t's buckets: slots[t*width:][:tiers[t].nb]
	n              int            // items queued
	named          slotMap[qitem] // memberlist's tm: the queued item of each name
	idGen          int64
	pool           *qpool // where bucket buffers come from and go back to
}

// qtier counts the items of one transmit count and its buckets, by
// message length, longest first. minLen is the last bucket's length, so
// that GetBroadcasts can pass over a tier where nothing fits (as it does,
// tier after tier, once a packet is nearly full) without touching its
// buckets. The buckets of all tiers are in one array, a fixed number of
// slots per tier (widened when a tier needs more): GetBroadcasts moves
// items from a tier to the next, and their buckets are then close
// together in memory rather than in an allocation per tier.
type qtier struct {
	n, nb, minLen int32
}

// initWidth is the initial number of bucket slots per tier: the
// simulator's messages come in a few lengths.
const initWidth = 4

// buckets returns tier t's buckets.
func (q *bqueue) buckets(t int32) []qbucket {
	i := int(t) * q.width
	return q.slots[i : i+int(q.tiers[t].nb) : i+q.width]
}

// addTiers makes tiers up to t.
func (q *bqueue) addTiers(t int32) {
	if q.width == 0 {
		q.width = initWidth
	}
	k := int(t) + 1 - len(q.tiers)
	q.tiers = append(q.tiers, make([]qtier, k)...)
	q.slots = append(q.slots, make([]qbucket, k*q.width)...)
}

// insertBucket inserts an empty bucket of length l at index bi of tier
// t, widening the tiers' slots if it has none left.
func (q *bqueue) insertBucket(t int32, bi int, l int32) {
	tr := &q.tiers[t]
	if int(tr.nb) == q.width {
		w := 2 * q.width
		slots := make([]qbucket, len(q.tiers)*w)
		for i := range q.tiers {
			copy(slots[i*w:], q.buckets(int32(i)))
		}
		q.slots, q.width = slots, w
	}
	bs := q.buckets(t)[:tr.nb+1]
	copy(bs[bi+1:], bs[bi:])
	buf := q.pool.get(minBucketCap)
	mid := int32(len(buf) / 2)
	bs[bi] = qbucket{msgLen: l, lo: mid, hi: mid, buf: buf}
	tr.nb++
	tr.minLen = bs[len(bs)-1].msgLen
}

// deleteBucket deletes the emptied bucket bi of tier t, its buffer going
// back to the pool.
func (q *bqueue) deleteBucket(t int32, bi int) {
	tr := &q.tiers[t]
	bs := q.buckets(t)
	q.pool.put(bs[bi].buf)
	copy(bs[bi:], bs[bi+1:])
	bs[len(bs)-1] = qbucket{}
	tr.nb--
	if tr.nb > 0 {
		tr.minLen = bs[tr.nb-1].msgLen
	}
}

// qbucket holds the items of one tier and length, by id ascending (so in
// memberlist's order from the last to the first): buf[lo:hi]. It is a
// deque with room on both sides, because items come and go at both ends
// and in between: a new broadcast is its tier-0 bucket's newest (the
// back), GetBroadcasts takes the back, Prune the front, and an item moved
// up a tier mostly lands at or near the front, since GetBroadcasts sends
// the newest first and a tier's older items wait for later packets (at
// 3,000 nodes 40% of those moves land at the very front, and an insert
// there once copied the whole bucket, 48 items on average). An insert or
// a removal moves whichever side of its position is shorter.
type qbucket struct {
	msgLen int32
	lo, hi int32  // a bucket never nears 2^31 items
	buf    []qent // a pool buffer: its length is its capacity
}

// items returns the bucket's items, by id ascending.
func (b *qbucket) items() []qent { return b.buf[b.lo:b.hi] }

// remove deletes the i-th item, moving the shorter side over it.
func (b *qbucket) remove(i int, pool *qpool) {
	lo, hi := int(b.lo), int(b.hi)
	if i < hi-lo-1-i {
		copy(b.buf[lo+1:], b.buf[lo:lo+i])
		b.lo++
	} else {
		copy(b.buf[lo+i:], b.buf[lo+i+1:hi])
		b.hi--
	}
	b.shrink(pool)
}

// shrink moves a bucket down to a quarter of its buffer to one half the
// size: items pass through a bucket, and one that held hundreds for a
// while would otherwise keep their room while other queues need it.
func (b *qbucket) shrink(pool *qpool) {
	for n := int(b.hi - b.lo); 4*n <= len(b.buf) && len(b.buf) >= 4*minBucketCap; {
		b.place(pool.get(len(b.buf)/2), n/2, len(b.buf)/2-n, pool)
	}
}

// insertBlock puts blk at the front of the items or behind them.
func (b *qbucket) insertBlock(front bool, blk []qent, pool *qpool) {
	if b.hi == b.lo {
		front = false // either end: the back
	}
	k := len(blk)
	b.makeRoom(front, k, pool)
	if front {
		b.lo -= int32(k)
		copy(b.buf[b.lo:], blk)
	} else {
		copy(b.buf[b.hi:], blk)
		b.hi += int32(k)
	}
}

// makeRoom makes room for k items in front of the items or behind them,
// as insert does: within the buffer when there is enough, else in a
// larger one.
func (b *qbucket) makeRoom(front bool, k int, pool *qpool) {
	n := int(b.hi - b.lo)
	i, room := n, len(b.buf)-int(b.hi)
	if front {
		i, room = 0, int(b.lo)
	}
	if room >= k {
		return
	}
	free := len(b.buf) - n
	if free >= k+n/4 {
		b.place(b.buf, i, free, pool)
		return
	}
	size := 2 * len(b.buf)
	for size-n < k+(n+k)/4 {
		size *= 2
	}
	b.place(pool.get(size), i, size-n, pool)
}

// mergeBlock merges blk, items by id ascending, into the bucket's, an item
// of blk replacing the one with its id (ReplaceOrInsert's equal key); tmp
// is scratch space. Only one side of the items moves, whichever is
// shorter: those up to blk's newest, merged into room made in front, or
// those from blk's oldest on, merged into room made behind. It returns
// how many items it added.
func (b *qbucket) mergeBlock(blk []qent, pool *qpool, tmp *[]qent) int {
	items := b.items()
	first, last := blk[0].id, blk[len(blk)-1].id
	// items[:head] are not after blk's last, items[tail:] not before its first.
	head, _ := slices.BinarySearchFunc(items, last, func(e qent, id int64) int {
		if e.id <= id {
			return -1
		}
		return 1
	})
	tail, _ := searchID(items, first)
	front := head < len(items)-tail
	var seg []qent
	if front {
		seg = append((*tmp)[:0], items[:head]...)
	} else {
		seg = append((*tmp)[:0], items[tail:]...)
	}
	*tmp = seg
	b.makeRoom(front, len(blk), pool)
	// Merge into the room: from the back when it is in front, else from
	// the front.
	var merged int
	if front {
		end := int(b.lo) + head
		w, i, j := end, len(seg)-1, len(blk)-1
		for i >= 0 || j >= 0 {
			w--
			switch {
			case j < 0 || i >= 0 && seg[i].id > blk[j].id:
				b.buf[w] = seg[i]
				i--
			case i >= 0 && seg[i].id == blk[j].id:
				b.buf[w] = blk[j]
				i, j = i-1, j-1
			default:
				b.buf[w] = blk[j]
				j--
			}
		}
		merged = end - w
		b.lo = int32(w)
	} else {
		w, i, j := int(b.lo)+tail, 0, 0
		for i < len(seg) || j < len(blk) {
			switch {
			case j == len(blk) || i < len(seg) && seg[i].id < blk[j].id:
				b.buf[w] = seg[i]
				i++
			case i < len(seg) && seg[i].id == blk[j].id:
				b.buf[w] = blk[j]
				i, j = i+1, j+1
			default:
				b.buf[w] = blk[j]
				j++
			}
			w++
		}
		merged = w - int(b.lo) - tail
		b.hi = int32(w)
	}
	return merged - len(seg)
}

// insert puts e at index i, moving the shorter side of i away from it.
// When that side has no room, the items are first moved within the buffer
// (when a quarter of it is free) or else to one twice its size, with the
// free room split in proportion to where i is: behind them for an append,
// in front of them for an insert at the front.
func (b *qbucket) insert(i int, e qent, pool *qpool) {
	lo, hi := int(b.lo), int(b.hi)
	n := hi - lo
	front := i < n-i
	if front && lo == 0 || !front && hi == len(b.buf) {
		switch free := len(b.buf) - n; {
		case free > 0 && free >= n/4:
			b.place(b.buf, i, free, pool)
		case free > 0:
			front = !front // little room, all on the other side: use it
		default:
			b.place(pool.get(2*len(b.buf)), i, len(b.buf), pool)
		}
		lo, hi = int(b.lo), int(b.hi)
	}
	if front {
		copy(b.buf[lo-1:], b.buf[lo:lo+i])
		b.lo--
		b.buf[lo-1+i] = e
	} else {
		copy(b.buf[lo+i+1:], b.buf[lo+i:hi])
		b.hi++
		b.buf[lo+i] = e
	}
}

// place moves the items to buf (b.buf itself, or a larger buffer, when
// the old one goes back to the pool) with free slots of room split around
// them: in front in proportion to the items behind i, and at least one on
// the side nearer to i.
func (b *qbucket) place(buf []qent, i, free int, pool *qpool) {
	n := int(b.hi - b.lo)
	front := free * (n - i) / max(n, 1)
	if i < n-i {
		front = max(front, 1)
	} else {
		front = min(front, free-1)
	}
	copy(buf[front:], b.buf[b.lo:b.hi])
	if &buf[0] != &b.buf[0] {
		pool.put(b.buf)
	}
	b.buf, b.lo, b.hi = buf, int32(front), int32(front+n)
}

// qpool keeps bucket buffers that emptied or were outgrown, by capacity
// (powers of two from minBucketCap), for any queue of the Sim to take. A
// queue's buckets grow and empty all the time as messages move through
// the tiers; without the pool each growth was a fresh allocation (about
// 1 GB at 10,000 nodes) and the memory of a queue that emptied stayed
// with it.
type qpool struct {
	free [][][]qent // by log2(capacity/minBucketCap)
	// dropped are the registry indexes of the items the queues dropped
	// (replaced, pruned or sent for the last time), for their owner to
	// take and clear.
	dropped []uint32
}

const minBucketCap = 4

func qclass(size int) int { return bits.Len(uint(size/minBucketCap)) - 1 }

// get returns a buffer of size items, a power of two from minBucketCap:
// a spare one of that size, else half of the smallest larger one (whose
// other halves are spare), else a new one.
func (p *qpool) get(size int) []qent {
	c := qclass(size)
	for d := c; d < len(p.free); d++ {
		k := len(p.free[d])
		if k == 0 {
			continue
		}
		buf := p.free[d][k-1]
		p.free[d][k-1] = nil
		p.free[d] = p.free[d][:k-1]
		for ; d > c; d-- {
			h := len(buf) / 2
			p.free[d-1] = append(p.free[d-1], buf[h:])
			buf = buf[:h:h]
		}
		return buf
	}
	return make([]qent, size)
}

// put takes back a buffer from get.
func (p *qpool) put(buf []qent) {
	c := qclass(len(buf))
	if c >= len(p.free) {
		p.free = append(p.free, make([][][]qent, c+1-len(p.free))...)
	}
	p.free[c] = append(p.free[c], buf)
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

// newBQueue returns an empty queue taking its buffers from pool, or from
// a pool of its own when pool is nil. A node holds its queues by value:
// they are looked at for every packet it sends, mostly to find them
// empty or to take from their first tiers, and a pointer to follow was
// a cache miss of its own.
// Names are node slots, below slots.
func newBQueue(retransmitMult, slots int, pool *qpool) bqueue {
	if pool == nil {
		pool = new(qpool)
	}
	return bqueue{retransmitMult: retransmitMult, pool: pool, named: newSlotMap[qitem](slots)}
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
		if old, ok := q.named.get(name); ok {
			q.deleteItem(old)
		}
	}
	q.addItem(it)
}

// bucket finds tier t's bucket of length l: its index, and whether it
// exists (else where it goes). A tier has a few buckets (the simulator's
// messages come in a few lengths), so a scan finds it sooner than a binary
// search.
func (q *bqueue) bucket(t, l int32) (int, bool) {
	if int(t) >= len(q.tiers) {
		return 0, false
	}
	bs := q.buckets(t)
	if len(bs) > 8 {
		return slices.BinarySearchFunc(bs, l, func(b qbucket, l int32) int {
			switch {
			case b.msgLen > l:
				return -1
			case b.msgLen < l:
				return 1
			}
			return 0
		})
	}
	for i := range bs {
		if bs[i].msgLen <= l {
			return i, bs[i].msgLen == l
		}
	}
	return len(bs), false
}

// removeAt removes item i of bucket bi of tier t, and the bucket when it
// empties (its buffer goes back to the pool). It is the B-tree's Delete of
// that item; the caller handles the name index.
func (q *bqueue) removeAt(t int32, bi, i int) {
	tr := &q.tiers[t]
	if b := &q.buckets(t)[bi]; b.hi-b.lo == 1 {
		q.deleteBucket(t, bi)
	} else {
		b.remove(i, q.pool)
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
		b := &q.buckets(it.transmits)[bi]
		if i, ok := searchID(b.items(), it.id); ok {
			q.pool.dropped = append(q.pool.dropped, b.items()[i].ref)
			q.removeAt(it.transmits, bi, i)
		}
	}
	if it.name != noName {
		q.named.del(it.name)
	}
	if q.n == 0 {
		q.idGen = 0
	}
}

// searchID returns the index of the first of items (by id ascending) whose
// id is not below id, and whether its id is id: slices.BinarySearchFunc
// by id, without a call per probe (replacing a named broadcast searches
// its bucket for the old item, several times per packet under loss).
func searchID(items []qent, id int64) (int, bool) {
	lo, hi := 0, len(items)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if items[m].id < id {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo, lo < len(items) && items[lo].id == id
}

// addItem is memberlist's addItem (ReplaceOrInsert: an item with an equal
// key is replaced), for a new broadcast; getBroadcasts puts items back
// with addBlock.
func (q *bqueue) addItem(it qitem) {
	if int(it.transmits) >= len(q.tiers) {
		q.addTiers(it.transmits)
	}
	bi, ok := q.bucket(it.transmits, it.msgLen)
	if !ok {
		q.insertBucket(it.transmits, bi, it.msgLen)
	}
	tr := &q.tiers[it.transmits]
	b := &q.buckets(it.transmits)[bi]
	e := qent{id: it.id, ref: it.ref, name: it.name}
	switch items := b.items(); {
	case len(items) == 0 || items[len(items)-1].id < it.id:
		// The newest of its bucket, as a new broadcast always is but
		// when the id generator wraps around: an append, without a
		// search.
		b.insert(len(items), e, q.pool)
		tr.n++
		q.n++
	default:
		if i, ok := searchID(items, it.id); ok {
			q.pool.dropped = append(q.pool.dropped, items[i].ref)
			items[i] = e
		} else {
			b.insert(i, e, q.pool)
			tr.n++
			q.n++
		}
	}
	if it.name != noName {
		q.named.set(it.name, it)
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
// NumNodes returns. sc is scratch space.
//
// memberlist takes, tier by tier, the least item that fits until none
// does, and then puts the items it took back one tier up. Which items
// those are follows from the buckets' lengths and sizes alone: from each
// bucket it takes the newest items, as many as fit, and it leaves the
// bucket for good once the next does not (the free room only shrinks).
// So the search reads the tiers' bucket headers, not their items, and
// the items then move as blocks: a bucket's newest k are copied out at
// once, and mostly land as a block at the front or the back of the next
// tier's bucket (else they are merged into it, as memberlist's one by one
// adds would place them). The name index and out change in memberlist's
// order.
func (q *bqueue) getBroadcasts(overhead, limit, numNodes int, out []uint32, sc *qscratch) []uint32 {
	if q.n == 0 {
		return out
	}
	transmitLimit := retransmitLimit(q.retransmitMult, numNodes)
	if q.n == 1 {
		return q.getOne(overhead, limit, transmitLimit, out)
	}
	bytesUsed := 0
	free := int64(limit - bytesUsed - overhead)
	takes := sc.takes[:0]
	minTr, maxTr := q.transmitRange()
search:
	for t := minTr; t <= maxTr && free > 0; t++ {
		tr := &q.tiers[t]
		if tr.n == 0 || int64(tr.minLen) > free {
			continue
		}
		for bi, b := range q.buckets(t) {
			l := int64(b.msgLen)
			k := int32(0)
			for k < b.hi-b.lo && free > 0 && l <= free {
				k++
				bytesUsed += overhead + int(l)
				free = int64(limit - bytesUsed - overhead)
			}
			if k > 0 {
				takes = append(takes, qtake{t: t, bi: int32(bi), k: k, l: b.msgLen})
			}
			if free <= 0 {
				break search
			}
		}
	}
	// Copy the items out, newest first.
	items := sc.items[:0]
	for i := range takes {
		tk := &takes[i]
		b := &q.buckets(tk.t)[tk.bi]
		blk := b.buf[b.hi-tk.k : b.hi]
		last := int(tk.t)+1 >= transmitLimit
		for j := len(blk) - 1; j >= 0; j-- {
			out = append(out, blk[j].ref)
			if last {
				if blk[j].name != noName {
					q.named.del(blk[j].name)
				}
				q.pool.dropped = append(q.pool.dropped, blk[j].ref)
			}
		}
		tk.off = int32(len(items))
		if !last {
			items = append(items, blk...)
		}
	}
	// Remove them, the last bucket first, so that removing an emptied
	// bucket leaves the others' indexes as they are.
	for i := len(takes) - 1; i >= 0; i-- {
		tk := takes[i]
		b := &q.buckets(tk.t)[tk.bi]
		b.hi -= tk.k
		if b.hi == b.lo {
			q.deleteBucket(tk.t, int(tk.bi))
		} else {
			b.shrink(q.pool)
		}
		q.tiers[tk.t].n -= tk.k
		q.n -= int(tk.k)
	}
	if q.n == 0 {
		q.idGen = 0
	}
	// Put them back a tier up, in memberlist's order.
	for i, tk := range takes {
		if int(tk.t)+1 >= transmitLimit {
			continue
		}
		end := len(items)
		if i+1 < len(takes) {
			end = int(takes[i+1].off)
		}
		q.addBlock(tk.t+1, tk.l, items[tk.off:end], &sc.merge)
	}
	sc.takes, sc.items = takes, items
	return out
}

// getOne is getBroadcasts of a queue holding one item, as a healthy
// node's Rollcall queue mostly does (its own announcement): the item is
// taken if it fits, and its bucket moves up a tier as it is, rather than
// going back to the pool for another to be drawn for the next tier.
func (q *bqueue) getOne(overhead, limit, transmitLimit int, out []uint32) []uint32 {
	t, _ := q.transmitRange()
	free := int64(limit - overhead)
	b := q.buckets(t)[0]
	if free <= 0 || int64(b.msgLen) > free {
		return out
	}
	e := b.buf[b.lo]
	out = append(out, e.ref)
	if int(t)+1 >= transmitLimit {
		if e.name != noName {
			q.named.del(e.name)
		}
		q.pool.dropped = append(q.pool.dropped, e.ref)
		q.removeAt(t, 0, 0)
		return out
	}
	if int(t)+1 >= len(q.tiers) {
		q.addTiers(t + 1)
	}
	// Tier t+1 is empty: the bucket is its only one. The queue was
	// empty for a moment, as memberlist's is between the item's removal
	// and its return, which resets the id generator.
	q.idGen = 0
	q.slots[int(t)*q.width] = qbucket{}
	q.tiers[t].n, q.tiers[t].nb = 0, 0
	q.slots[int(t+1)*q.width] = b
	q.tiers[t+1] = qtier{n: 1, nb: 1, minLen: b.msgLen}
	if e.name != noName {
		q.named.set(e.name, qitem{id: e.id, transmits: t + 1, msgLen: b.msgLen, ref: e.ref, name: e.name})
	}
	return out
}

// qscratch is getBroadcasts' scratch space.
type qscratch struct {
	takes []qtake
	items []qent
	merge []qent
}

// qtake is what getBroadcasts takes from one bucket: the k newest items
// of bucket bi (of length l) of tier t, copied to qscratch.items[off:]
// when they go back.
type qtake struct {
	t, bi, k, l, off int32
}

// addBlock adds blk, items of length l by id ascending, to tier t, as
// addItem adds each of them from the newest to the oldest. tmp is scratch
// space.
func (q *bqueue) addBlock(t, l int32, blk []qent, tmp *[]qent) {
	if int(t) >= len(q.tiers) {
		q.addTiers(t)
	}
	bi, ok := q.bucket(t, l)
	if !ok {
		q.insertBucket(t, bi, l)
	}
	b := &q.buckets(t)[bi]
	added := len(blk)
	switch n := b.hi - b.lo; {
	case n == 0 || b.buf[b.hi-1].id < blk[0].id:
		b.insertBlock(false, blk, q.pool)
	case b.buf[b.lo].id > blk[len(blk)-1].id:
		b.insertBlock(true, blk, q.pool)
	default:
		added = b.mergeBlock(blk, q.pool, tmp)
	}
	q.tiers[t].n += int32(added)
	q.n += added
	for j := len(blk) - 1; j >= 0; j-- {
		if e := blk[j]; e.name != noName {
			q.named.set(e.name, qitem{id: e.id, transmits: t, msgLen: l, ref: e.ref, name: e.name})
		}
	}
}

// numQueued is NumQueued.
func (q *bqueue) numQueued() int { return q.n }

// prune is Prune: drop the greatest items (most transmitted, shortest,
// oldest) until at most maxRetain remain.
func (q *bqueue) prune(maxRetain int) {
	for q.n > maxRetain {
		_, hi := q.transmitRange()
		bs := q.buckets(hi)
		b := &bs[len(bs)-1] // empty buckets are removed
		e := b.buf[b.lo]
		q.deleteItem(qitem{id: e.id, transmits: hi, msgLen: b.msgLen, ref: e.ref, name: e.name})
	}
}
