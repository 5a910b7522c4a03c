package sim

import (
	"math"
	"slices"
)

// evKind is what an event does when its time comes.
type evKind uint8

const (
	evChange        evKind = iota // client action a
	evExpire                      // owner sweep finds client a silent (b: epoch)
	evTick                        // node: the core's deadline (b: the deadline, wall ns)
	evGossip                      // node: memberlist gossip tick
	evProbe                       // node: memberlist probe tick
	evProbeTimeout                // node: direct ping unanswered (b: probe seq)
	evProbeDeadline               // node: probe interval over (b: probe seq)
	evHelperTimeout               // node: indirect ping unanswered (b: local seq)
	evPacket                      // packet arrives
	evStream                      // stream message arrives
	evPushPull                    // node: memberlist push/pull tick
	evSuspicion                   // node: suspicion of node a times out (b: suspicion id)
	evCrash                       // node crashes
	evRestart                     // node restarts as a new incarnation
	evSplit                       // partition a starts
	evHeal                        // partition a heals
	evPullDone                    // node: pull to a sent (clears the in-flight mark)
	evAnswerDone                  // node: an anti-entropy answer finished sending
	evPublish                     // node: writes delayed by a measured flush delay reach the core
)

func (k evKind) String() string {
	names := [...]string{"change", "expire", "tick", "gossip", "probe", "probe-timeout", "probe-deadline",
		"helper-timeout", "packet", "stream", "push-pull", "suspicion", "crash", "restart",
		"split", "heal", "pull-done", "answer-done", "publish"}
	if int(k) < len(names) {
		return names[k]
	}
	return "event?"
}

// event is one scheduled happening. Events at the same time run in the
// order they were scheduled (seq), so a run is a pure function of its seed.
// An event holds no pointers: a packet or stream in flight is named by its
// index in the Sim's tables (b), so the queue's buckets, which hold a
// million events at the peak of a burst at high loss, are 40 bytes an
// event and are never scanned by the garbage collector.
type event struct {
	at   int64
	seq  uint64
	b    uint64 // evPacket: the packet's index (Sim.pkts); evStream: the stream's (Sim.strms)
	node int32
	a    int32
	life uint32 // the node's life the event belongs to; stale after a crash
	kind evKind
}

// eventQueue orders events by (at, seq): a timing wheel for the near
// future, where nearly every event lands (packets a latency ahead, gossip
// and alive ticks), and a heap for the rest. Events of the wheel's window
// wait unsorted in a bucket per wheelTick of time; a bucket is sorted when
// it comes up, and then popped in order. A push costs an append, a pop a
// step along a sorted slice, where a heap of tens of thousands of events
// costs a sift through levels that are cold in the cache. The order is
// total, so the queue pops exactly the sequence a heap would
// (TestEventQueueOrder).
type eventQueue struct {
	seq uint64
	n   int // events queued, the timer FIFO's excluded
	// buckets[b&wheelMask] holds the events of bucket b (at>>wheelShift),
	// for cur < b < cur+wheelSize; bucket cur is the one being popped,
	// sorted, from head on (with any event pushed for an earlier time,
	// which the simulator never does). Events of later buckets are in far.
	buckets [][]event
	cur     int64
	head    int
	inWheel int // events in buckets, the current one's popped ones excluded
	far     eventHeap
	// spare holds the buffers of big buckets once popped (at most
	// maxSpares, the biggest): a burst (a relay to every member) fills
	// one bucket with up to a million events, and the next burst lands
	// in another bucket, which takes a spare when it fills up rather
	// than growing its own by doubling, and every bucket a burst once
	// filled does not keep its buffer for good.
	spare [][]event
	// timers are timers set a fixed delay ahead (pushTimer), so their
	// times only grow: a FIFO, merged with the rest by (at, seq). A
	// suspicion's first check is one, set for every suspicion a node
	// raises (millions in a run at high loss) and mostly moot by its
	// time, its suspicion refuted: stale says so, and a stale timer is
	// dropped when it comes to the front, or when the FIFO fills up,
	// without being popped. In the heap each cost a sift on the way in
	// and out and 64 bytes for the whole timeout (12s at 1,000 nodes).
	timers timerFIFO
	stale  func(t *timer) bool // nil: no timer is stale
}

// timerFIFO is a ring of timers by (at, seq).
type timerFIFO struct {
	buf  []timer
	head int
	n    int
}

// timer is an event of the timer FIFO: 48 bytes where an event takes 64.
// Its b fits 32 bits (pushTimer checks); c is for stale alone.
type timer struct {
	at   int64
	seq  uint64
	node int32
	a    int32
	life uint32
	b    uint32
	c    uint32
	kind evKind
}

func (t *timer) event() event {
	return event{at: t.at, seq: t.seq, kind: t.kind, node: t.node, a: t.a, life: t.life, b: uint64(t.b)}
}

func (f *timerFIFO) at(i int) *timer { return &f.buf[(f.head+i)&(len(f.buf)-1)] }

const (
	wheelShift = 17 // a bucket spans 2^17 ns, about 131µs
	wheelSize  = 1 << 13
	wheelMask  = wheelSize - 1 // the wheel spans about 1.07s
)

// len returns the number of events queued, stale timers at the front
// dropped first.
func (q *eventQueue) len() int {
	q.dropStale()
	return q.n + q.timers.n
}

func less(a, b *event) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.seq < b.seq
}

func cmpEvents(a, b event) int {
	switch {
	case less(&a, &b):
		return -1
	case less(&b, &a):
		return 1
	}
	return 0
}

func (q *eventQueue) push(e event) {
	q.seq++
	e.seq = q.seq
	q.n++
	if q.buckets == nil {
		q.buckets = make([][]event, wheelSize) // cur 0: virtual time starts at 0
	}
	b := e.at >> wheelShift
	switch {
	case b <= q.cur:
		// The bucket being popped (or an earlier time, which the
		// simulator never schedules): into its sorted rest.
		cb := &q.buckets[q.cur&wheelMask]
		i, _ := slices.BinarySearchFunc((*cb)[q.head:], e, cmpEvents)
		*cb = slices.Insert(*cb, q.head+i, e)
	case b < q.cur+wheelSize:
		bk := &q.buckets[b&wheelMask]
		if len(*bk) == cap(*bk) && len(*bk) >= minSpare {
			q.growBucket(bk)
		}
		*bk = append(*bk, e)
		q.inWheel++
	default:
		q.far.push(e)
	}
}

// minSpare is the capacity (events) from which a bucket's buffer is kept
// as a spare once popped, and from which a full bucket looks for one.
const minSpare = 1 << 12

// maxSpares is the number of spare bucket buffers kept.
const maxSpares = 4

// growBucket makes room in the full bucket bk: the smallest spare bigger
// than it, its events copied over, or else append's growth.
func (q *eventQueue) growBucket(bk *[]event) {
	best := -1
	for i, sp := range q.spare {
		if cap(sp) > len(*bk) && (best < 0 || cap(sp) < cap(q.spare[best])) {
			best = i
		}
	}
	if best < 0 {
		return
	}
	sp := append(q.spare[best][:0], *bk...)
	q.spare = slices.Delete(q.spare, best, best+1)
	*bk = sp
}

// keepSpare keeps the big popped bucket buffer buf as a spare, in place
// of a smaller spare when there are maxSpares already, or drops it.
func (q *eventQueue) keepSpare(buf []event) {
	if len(q.spare) < maxSpares {
		q.spare = append(q.spare, buf[:0])
		return
	}
	small := 0
	for i, sp := range q.spare {
		if cap(sp) < cap(q.spare[small]) {
			small = i
		}
	}
	if cap(q.spare[small]) < cap(buf) {
		q.spare[small] = buf[:0]
	}
}

// pushTimer queues e, set a fixed delay ahead of now, in the timer FIFO:
// its time is not before that of any timer there; c is what stale needs
// beside e. An event that breaks the order, or whose b does not fit a
// timer, goes to push instead (and is never stale).
func (q *eventQueue) pushTimer(e event, c uint32) {
	f := &q.timers
	if e.b > math.MaxUint32 || f.n > 0 && e.at < f.at(f.n-1).at {
		q.push(e)
		return
	}
	if f.n == len(f.buf) {
		q.growTimers()
	}
	q.seq++
	*f.at(f.n) = timer{at: e.at, seq: q.seq, kind: e.kind, node: e.node, a: e.a, life: e.life, b: uint32(e.b), c: c}
	f.n++
}

// growTimers makes room in a full timer FIFO: it drops the stale timers,
// and doubles the ring when that frees less than three quarters of it
// (so a timer is looked at a few times at most before it is run). The
// ring then holds a few times the timers live at one time, not every
// timer set over a timeout.
func (q *eventQueue) growTimers() {
	f := &q.timers
	kept := 0
	for i := range f.n {
		t := *f.at(i)
		if q.stale != nil && q.stale(&t) {
			continue
		}
		*f.at(kept) = t
		kept++
	}
	f.n = kept
	if size := len(f.buf); size == 0 || kept > size/4 {
		buf := make([]timer, max(2*size, 64))
		for i := range kept {
			buf[i] = *f.at(i)
		}
		f.buf, f.head = buf, 0
	}
}

// dropStale drops stale timers from the front of the timer FIFO.
func (q *eventQueue) dropStale() {
	f := &q.timers
	for f.n > 0 && q.stale != nil {
		if !q.stale(f.at(0)) {
			return
		}
		*f.at(0) = timer{}
		f.head = (f.head + 1) & (len(f.buf) - 1)
		f.n--
	}
}

// timerFirst reports whether the next event is the timer FIFO's: the
// queue is not empty and stale timers are dropped from its front.
func (q *eventQueue) timerFirst() bool {
	f := &q.timers
	if f.n == 0 {
		return false
	}
	if q.n == 0 {
		return true
	}
	q.ready()
	e := &q.buckets[q.cur&wheelMask][q.head]
	t := f.at(0)
	return t.at < e.at || t.at == e.at && t.seq < e.seq
}

// ready makes the current bucket hold the next event; the queue is not
// empty.
func (q *eventQueue) ready() {
	for q.head == len(q.buckets[q.cur&wheelMask]) {
		cb := &q.buckets[q.cur&wheelMask]
		if cap(*cb) >= minSpare {
			q.keepSpare(*cb) // the bucket takes a fresh buffer
			*cb = nil
		} else {
			*cb = (*cb)[:0]
		}
		q.head = 0
		if q.inWheel == 0 {
			q.cur = q.far.h[0].at >> wheelShift // jump over empty buckets
		} else {
			q.cur++
		}
		cb = &q.buckets[q.cur&wheelMask]
		q.inWheel -= len(*cb)
		for q.far.len() > 0 && q.far.h[0].at>>wheelShift == q.cur {
			*cb = append(*cb, q.far.pop())
		}
		slices.SortFunc(*cb, cmpEvents)
	}
}

func (q *eventQueue) pop() event {
	q.dropStale()
	if q.timerFirst() {
		f := &q.timers
		e := f.at(0).event()
		*f.at(0) = timer{}
		f.head = (f.head + 1) & (len(f.buf) - 1)
		f.n--
		return e
	}
	q.ready()
	e := q.buckets[q.cur&wheelMask][q.head]
	q.head++
	q.n--
	return e
}

func (q *eventQueue) peekAt() int64 {
	q.dropStale()
	if q.timerFirst() {
		return q.timers.at(0).at
	}
	q.ready()
	return q.buckets[q.cur&wheelMask][q.head].at
}

// eventHeap is a 4-ary min-heap of events ordered by (at, seq): half the
// levels of a binary heap, and each sift moves a hole instead of swapping.
type eventHeap struct {
	h []event
}

func (q *eventHeap) len() int { return len(q.h) }

func (q *eventHeap) push(e event) {
	q.h = append(q.h, e)
	i := len(q.h) - 1
	for i > 0 {
		p := (i - 1) / 4
		if !less(&e, &q.h[p]) {
			break
		}
		q.h[i] = q.h[p]
		i = p
	}
	q.h[i] = e
}

func (q *eventHeap) pop() event {
	top := q.h[0]
	n := len(q.h) - 1
	last := q.h[n]
	q.h[n] = event{}
	q.h = q.h[:n]
	if n == 0 {
		return top
	}
	i := 0
	for {
		c := 4*i + 1
		if c >= n {
			break
		}
		m := c
		for j := c + 1; j < c+4 && j < n; j++ {
			if less(&q.h[j], &q.h[m]) {
				m = j
			}
		}
		if !less(&q.h[m], &last) {
			break
		}
		q.h[i] = q.h[m]
		i = m
	}
	q.h[i] = last
	return top
}
