package sim

// evKind is what an event does when its time comes.
type evKind uint8

const (
	evChange        evKind = iota // client action a
	evExpire                      // owner sweep finds client a silent (b: epoch)
	evFlush                       // node: BatchDelay passed, flush pending deltas
	evGossip                      // node: memberlist gossip tick
	evProbe                       // node: memberlist probe tick
	evProbeTimeout                // node: direct ping unanswered (b: probe seq)
	evProbeDeadline               // node: probe interval over (b: probe seq)
	evHelperTimeout               // node: indirect ping unanswered (b: local seq)
	evPacket                      // packet arrives
	evStream                      // stream message arrives
	evAlive                       // node: Rollcall alive announcement
	evLease                       // node: lease expiry tick
	evPushPull                    // node: memberlist push/pull tick
	evSuspicion                   // node: suspicion of node a times out (b: suspicion id)
	evCrash                       // node crashes
	evRestart                     // node restarts as a new incarnation
	evSplit                       // partition a starts
	evHeal                        // partition a heals
	evPullDone                    // node: pull to a sent (clears the in-flight mark)
	evAnswerDone                  // node: an anti-entropy answer finished sending
	evReconnect                   // node: try to rejoin dead members
)

func (k evKind) String() string {
	names := [...]string{"change", "expire", "flush", "gossip", "probe", "probe-timeout", "probe-deadline",
		"helper-timeout", "packet", "stream", "alive", "lease", "push-pull", "suspicion", "crash", "restart",
		"split", "heal", "pull-done", "answer-done", "reconnect"}
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

// eventQueue is a 4-ary min-heap of events ordered by (at, seq): half the
// levels of a binary heap, and each sift moves a hole instead of swapping.
// The order is total, so any heap pops the same sequence.
type eventQueue struct {
	h   []event
	seq uint64
}

func (q *eventQueue) len() int { return len(q.h) }

func less(a, b *event) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.seq < b.seq
}

func (q *eventQueue) push(e event) {
	q.seq++
	e.seq = q.seq
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

func (q *eventQueue) pop() event {
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

func (q *eventQueue) peekAt() int64 { return q.h[0].at }
