package sim

import "slices"

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
type event struct {
	at   int64
	seq  uint64
	kind evKind
	node int32
	a    int32
	life uint32 // the node's life the event belongs to; stale after a crash
	b    uint64
	pkt  *packet
	strm *stream
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
	n   int // events queued
	// buckets[b&wheelMask] holds the events of bucket b (at>>wheelShift),
	// for cur < b < cur+wheelSize; bucket cur is the one being popped,
	// sorted, from head on (with any event pushed for an earlier time,
	// which the simulator never does). Events of later buckets are in far.
	buckets [][]event
	cur     int64
	head    int
	inWheel int // events in buckets, the current one's popped ones excluded
	far     eventHeap
}

const (
	wheelShift = 17 // a bucket spans 2^17 ns, about 131µs
	wheelSize  = 1 << 13
	wheelMask  = wheelSize - 1 // the wheel spans about 1.07s
)

func (q *eventQueue) len() int { return q.n }

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
		q.buckets[b&wheelMask] = append(q.buckets[b&wheelMask], e)
		q.inWheel++
	default:
		q.far.push(e)
	}
}

// ready makes the current bucket hold the next event; the queue is not
// empty.
func (q *eventQueue) ready() {
	for q.head == len(q.buckets[q.cur&wheelMask]) {
		cb := &q.buckets[q.cur&wheelMask]
		*cb, q.head = (*cb)[:0], 0 // pop zeroed what it took
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
	q.ready()
	cb := q.buckets[q.cur&wheelMask]
	e := cb[q.head]
	cb[q.head] = event{} // drop its pointers
	q.head++
	q.n--
	return e
}

func (q *eventQueue) peekAt() int64 {
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
