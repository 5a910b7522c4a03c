package sim

import (
	"math"

	"github.com/rollcall/rollcall/crdt"
)

// What the simulator measures, and how:
//
//   - A change is one owner write (PutLocal). Its targets are the nodes up
//     when it was written; a target has it once its record for the key is
//     at least as new (a later write of the key covers an earlier one). It
//     has converged when every target that is still up has it; its
//     convergence time is when the last one got it.
//   - What a node shows: a session is shown online at a node when the
//     node's projected record (Replica.Session) is active. Every replica
//     call that can change that reports the users it changed, and only
//     those are re-examined.
//   - A ghost is a session whose client is gone (clean disconnect, silent
//     failure, or gateway crash) still shown online by a live node; it
//     lasts until that node shows it offline.
//   - A false offline is a session whose client is connected to a live
//     gateway shown offline by a node that had shown it online (a gateway
//     wrongly marked down: a false suspicion, a partition, a lapsed lease).
//   - Offline detection after a silent client failure is the time from the
//     failure to each node showing the session offline; after a gateway
//     crash, the time to each live node marking the gateway down (or
//     retiring its incarnation), whether or not it owned sessions.

// deathCause is why a client's session ended.
type deathCause uint8

const (
	causeClean deathCause = iota
	causeFail
	causeCrash
)

type obsKey struct{ n, c int32 }

// tracker keeps the per-observer bookkeeping behind the ghost, false
// offline and detection metrics.
type tracker struct {
	words int
	shown [][]uint64 // per client: observers showing its session online

	lateGhost map[obsKey]int64          // ghosts that began after the death
	failOff   map[int32]map[int32]int64 // silent failure: client -> observer -> last flip to offline
	falseOpen map[int32]map[int32]int64 // client -> observer -> start
	crashes   map[int32]*crashTrack     // open crash detections by node
	causes    map[int32]deathCause      // client -> why its last session ended
	ghost     struct{ sum, n, max float64 }
	falseOff  struct {
		n   int
		sum float64
	}
	clientDet      []float64 // ms
	crashDet       []float64 // ms
	censored       int       // crash detections not done by the end
	clientCensored int       // client failure detections not done by the end
}

type crashTrack struct {
	at      int64
	pending []uint64
	left    int
}

func newTracker(nodes int) *tracker {
	return &tracker{
		words:     (nodes + 63) / 64,
		lateGhost: make(map[obsKey]int64),
		failOff:   make(map[int32]map[int32]int64),
		falseOpen: make(map[int32]map[int32]int64),
		crashes:   make(map[int32]*crashTrack),
		causes:    make(map[int32]deathCause),
	}
}

func bit(b []uint64, i int32) bool { return b[i/64]&(1<<(i%64)) != 0 }
func setBit(b []uint64, i int32)   { b[i/64] |= 1 << (i % 64) }
func clearBit(b []uint64, i int32) { b[i/64] &^= 1 << (i % 64) }

func (t *tracker) addClient() { t.shown = append(t.shown, make([]uint64, t.words)) }

// observeUser re-examines what node n shows of a user after a replica call
// reported it changed: ghost, false-offline and convergence bookkeeping.
func (s *Sim) observeUser(n *node, user string) {
	if cid, ok := s.byUser[user]; ok {
		s.observeClient(n, cid)
	}
}

// observeClient is observeUser for the user of client cid.
func (s *Sim) observeClient(n *node, cid int32) {
	c := s.clients[cid]
	sess, has := n.r.Session(crdt.Key{User: c.user, Device: c.device})
	s.track.update(s, n, c, has && sess.State == crdt.StateActive)
	if has {
		s.reach(n, c, &sess)
	}
}

func (t *tracker) update(s *Sim, n *node, c *client, shown bool) {
	b := t.shown[c.id]
	if bit(b, n.id) == shown {
		return
	}
	if shown {
		setBit(b, n.id)
		if c.online {
			t.closeFalse(s, c.id, n.id)
		} else {
			t.lateGhost[obsKey{n.id, c.id}] = s.now
		}
		return
	}
	clearBit(b, n.id)
	if c.online {
		m := t.falseOpen[c.id]
		if m == nil {
			m = make(map[int32]int64)
			t.falseOpen[c.id] = m
		}
		m[n.id] = s.now
		t.falseOff.n++
		return
	}
	t.closeGhost(s, c, n.id, true)
}

func (t *tracker) closeFalse(s *Sim, cid, n int32) {
	if m := t.falseOpen[cid]; m != nil {
		if start, ok := m[n]; ok {
			t.falseOff.sum += float64(s.now - start)
			delete(m, n)
			if len(m) == 0 {
				delete(t.falseOpen, cid)
			}
		}
	}
}

func (t *tracker) closeGhost(s *Sim, c *client, n int32, detected bool) {
	start := c.diedAt
	k := obsKey{n, c.id}
	if ls, ok := t.lateGhost[k]; ok {
		start = ls
		delete(t.lateGhost, k)
	}
	d := float64(s.now-start) / 1e6
	t.ghost.sum += d
	t.ghost.n++
	t.ghost.max = math.Max(t.ghost.max, d)
	if detected && t.causes[c.id] == causeFail {
		// The last flip counts: a lapsed lease can show the session
		// offline, then online again, before the failure is detected.
		m := t.failOff[c.id]
		if m == nil {
			m = make(map[int32]int64)
			t.failOff[c.id] = m
		}
		m[n] = s.now
	}
}

// flushFailures turns a failed client's last offline flips into detection
// samples: at its reconnect, or at the end of the run.
func (t *tracker) flushFailures(c *client) {
	m := t.failOff[c.id]
	for _, n := range sortedKeys(m) {
		t.clientDet = append(t.clientDet, float64(m[n]-c.diedAt)/1e6)
	}
	delete(t.failOff, c.id)
}

// clientDown: the client is gone; every node showing it online now shows
// a ghost.
func (t *tracker) clientDown(s *Sim, c *client, cause deathCause) {
	t.causes[c.id] = cause
	if m := t.falseOpen[c.id]; m != nil {
		for _, n := range sortedKeys(m) {
			t.closeFalse(s, c.id, n)
		}
	}
}

// clientUp: the client is back; a ghost of its old session is now right.
func (t *tracker) clientUp(s *Sim, c *client) {
	t.flushFailures(c)
	b := t.shown[c.id]
	for w, word := range b {
		for word != 0 {
			i := int32(w*64 + trailingZeros(word))
			word &= word - 1
			t.closeGhost(s, c, i, false)
		}
	}
}

// nodeCrashed: a crashed node stops observing, and its own detection by
// every live node starts.
func (t *tracker) nodeCrashed(s *Sim, x *node) {
	for cid, b := range t.shown {
		if !bit(b, x.id) {
			continue
		}
		clearBit(b, x.id)
		delete(t.lateGhost, obsKey{x.id, int32(cid)})
		t.closeFalse(s, int32(cid), x.id)
	}
	for _, id := range sortedKeys(t.crashes) {
		if tr := t.crashes[id]; bit(tr.pending, x.id) {
			clearBit(tr.pending, x.id)
			tr.left--
		}
	}
	if old := t.crashes[x.id]; old != nil {
		t.finishCrash(s, old)
	}
	tr := &crashTrack{at: s.now, pending: make([]uint64, t.words)}
	for _, m := range s.nodes {
		if !m.up || m.id == x.id {
			continue
		}
		if _, down := m.r.NodeDown(x.name); down {
			t.crashDet = append(t.crashDet, 0)
			continue
		}
		setBit(tr.pending, m.id)
		tr.left++
	}
	t.crashes[x.id] = tr
}

// nodeShownDown: observer n stopped showing node x's sessions (marked it
// down, or retired its incarnation).
func (t *tracker) nodeShownDown(s *Sim, n *node, x int32) {
	tr := t.crashes[x]
	if tr == nil || !bit(tr.pending, n.id) {
		return
	}
	clearBit(tr.pending, n.id)
	tr.left--
	t.crashDet = append(t.crashDet, float64(s.now-tr.at)/1e6)
}

// finishCrash censors a crash's pending detections at now.
func (t *tracker) finishCrash(s *Sim, tr *crashTrack) {
	for _, word := range tr.pending {
		for word != 0 {
			word &= word - 1
			t.crashDet = append(t.crashDet, float64(s.now-tr.at)/1e6)
			t.censored++
		}
	}
	tr.left = 0
	clear(tr.pending)
}

func trailingZeros(x uint64) int {
	n := 0
	for x&1 == 0 {
		x >>= 1
		n++
	}
	return n
}

// change is one owner write and its spread.
type change struct {
	cid        int32
	epoch, seq uint64
	at         int64
	reached    []uint64
	targets    int
	need       int
	lastReach  int64
	done       bool
}

// ageBins is the resolution of the convergence curve: 100 bins per decade
// from 1µs to 10^4 s, plus bin 0 for "at once".
const (
	binsPerDecade = 100
	ageDecades    = 10
	ageBinCount   = binsPerDecade*ageDecades + 1
)

func ageBin(d int64) int {
	if d < 1000 {
		return 0
	}
	b := 1 + int(math.Floor(math.Log10(float64(d)/1000)*binsPerDecade))
	return min(b, ageBinCount-1)
}

// binUpper is the upper edge of bin b, in nanoseconds.
func binUpper(b int) float64 {
	if b == 0 {
		return 1000
	}
	return 1000 * math.Pow(10, float64(b)/binsPerDecade)
}

func (s *Sim) newChange(c *client, owner *node, sess *crdt.Session) {
	ch := &change{cid: c.id, epoch: sess.Epoch, seq: sess.Seq, at: s.now, reached: make([]uint64, s.track.words)}
	for _, m := range s.nodes {
		if m.up {
			ch.targets++
		}
	}
	setBit(ch.reached, owner.id)
	ch.need = ch.targets - 1
	ch.lastReach = s.now
	s.ages[0]++
	s.targetsTotal += ch.targets
	s.changes = append(s.changes, ch)
	if ch.need == 0 {
		ch.done = true
		return
	}
	s.openByCl[c.id] = append(s.openByCl[c.id], ch)
}

// reach records that node n holds sess for client c: it may be the first
// time n has some open change of c.
func (s *Sim) reach(n *node, c *client, sess *crdt.Session) {
	open := s.openByCl[c.id]
	if len(open) == 0 {
		return
	}
	finished := false
	for _, ch := range open {
		if n.born > ch.at || bit(ch.reached, n.id) || !s.covers(n, ch, sess) {
			continue
		}
		setBit(ch.reached, n.id)
		ch.need--
		ch.lastReach = s.now
		s.ages[ageBin(s.now-ch.at)]++
		if ch.need == 0 {
			ch.done = true
			finished = true
		}
	}
	if finished {
		s.compactOpen(c.id)
	}
}

func (s *Sim) compactOpen(cid int32) {
	open := s.openByCl[cid]
	kept := open[:0]
	for _, ch := range open {
		if !ch.done {
			kept = append(kept, ch)
		}
	}
	clear(open[len(kept):])
	if len(kept) == 0 {
		delete(s.openByCl, cid)
		return
	}
	s.openByCl[cid] = kept
}

// covers reports whether a node's record is at least as new as a change:
// a later epoch, a later write of the epoch, or the epoch's end (a record
// really terminal, not just projected expired because its gateway is down).
func (s *Sim) covers(n *node, ch *change, sess *crdt.Session) bool {
	switch {
	case sess.Epoch != ch.epoch:
		return sess.Epoch > ch.epoch
	case sess.Seq >= ch.seq:
		return true
	case sess.State.Terminal():
		_, down := n.r.NodeDown(sess.Gateway)
		return !down
	}
	return false
}

// dropTarget removes a crashed node from the targets of open changes it
// had not got.
func (s *Sim) dropTarget(x int32, born int64) {
	for _, cid := range sortedKeys(s.openByCl) {
		finished := false
		for _, ch := range s.openByCl[cid] {
			if born > ch.at || bit(ch.reached, x) {
				continue
			}
			ch.need--
			ch.targets--
			s.targetsTotal--
			if ch.need == 0 {
				ch.done = true
				finished = true
			}
		}
		if finished {
			s.compactOpen(cid)
		}
	}
}
