package node

import (
	"errors"
	"slices"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/protocol"
)

// Sessions held on behalf of users. An app that runs its own connection
// tier keeps its users present through one connection per backend: a
// connection whose token has the backend grant tracks sessions for other
// users (track) and ends them (untrack). Each tracked session is a session
// like any other in the replica (its own id and epoch, owned and written
// by this gateway, superseded by a newer epoch of its (user, device) and
// superseding an older one), but it has no connection of its own: it lives
// as long as the connection that tracks it.
//
//	track       handleTrack: PutLocal(active) with a new epoch, or, for a
//	            (user, device) the connection tracks already, a later
//	            write of the same session when its status, groups or meta
//	            change; the session joins n.tracked and the connection's
//	            list
//	untrack     handleUntrack: PutLocal(disconnected)
//	connection  closes: endConnSession ends every session it tracks,
//	            disconnected, on a goroutine of its own; goes silent past
//	            Timeout: expireSession (the sweeper) ends them expired.
//	            One pass over the connection's list, in batches of
//	            endTrackedBatch writes per hold of mu, each batch published
//	            as one slice of deltas
//	superseded  a newer epoch of the (user, device) here (handleHello,
//	            another connection's track) or from another gateway
//	            (afterRemoteChangeLocked): the session is forgotten without
//	            a write, as a connection's is
//
// Liveness is the connection's: its heartbeats store its lastActive (one
// atomic store, no write, no gossip) and the wheel holds the connection
// once, so a heartbeat refreshes every session it tracks at O(1) and
// nothing per session is timed. A record's ExpiresAt is the connection's
// deadline at the record's write, like any session's.
//
// Memory: a tracked session costs its replica record (as every session
// does on every gateway) and, here only, one trackedSession and its slot
// in n.tracked; its status, groups, meta and id live in the replica alone.

// trackedSession is one session a connection tracks. Guarded by n.mu.
type trackedSession struct {
	key   crdt.Key
	epoch uint64
	owner *conn
	// prev and next chain the owner's tracked sessions (trackSet.head).
	prev, next *trackedSession
}

// trackSet is what a connection that tracks sessions holds: its list and
// its allowance. Made at its first track; guarded by n.mu.
type trackSet struct {
	head   *trackedSession
	count  int
	bucket tokenBucket // sessions tracked or untracked (Config.TrackRate)
}

// endTrackedBatch is how many tracked sessions endTracked writes per hold
// of mu: a connection's 100,000 end in about a hundred short holds, so the
// requests of other connections wait a batch, not the whole pass.
const endTrackedBatch = 1024

// trackEntry is one checked session of a track or untrack request.
type trackEntry struct {
	key    crdt.Key
	status crdt.Status
	groups []string // sorted, unique
	meta   string   // compact JSON object, "" for none
}

// parseTrack checks the sessions of a track (untrack false) or untrack
// request and returns them in order: 1 to MaxTrackPerRequest, each with a
// valid user and device and no (user, device) twice; a track's status,
// groups and meta as a hello's. An untrack reads user and device only.
func parseTrack(req *protocol.Request, untrack bool) ([]trackEntry, *requestError) {
	switch {
	case len(req.Sessions) == 0:
		return nil, errorf(protocol.CodeBadRequest, "want sessions: [{\"user\", \"device\"}, ...]")
	case len(req.Sessions) > protocol.MaxTrackPerRequest:
		return nil, errorf(protocol.CodeBadRequest, "%d sessions: at most %d per request", len(req.Sessions), protocol.MaxTrackPerRequest)
	}
	out := make([]trackEntry, len(req.Sessions))
	seen := make(map[crdt.Key]struct{}, len(req.Sessions))
	for i := range req.Sessions {
		s := &req.Sessions[i]
		where := func(rerr *requestError) *requestError {
			rerr.msg = "sessions[" + strconv.Itoa(i) + "]: " + rerr.msg
			return rerr
		}
		if rerr := checkName("user", s.User); rerr != nil {
			return nil, where(rerr)
		}
		if rerr := checkName("device", s.Device); rerr != nil {
			return nil, where(rerr)
		}
		e := &out[i]
		e.key = crdt.Key{User: s.User, Device: s.Device}
		if _, dup := seen[e.key]; dup {
			return nil, where(errorf(protocol.CodeBadRequest, "%s is listed twice", truncate(e.key.String(), 64)))
		}
		seen[e.key] = struct{}{}
		if untrack {
			continue
		}
		if s.Status != "" {
			st, err := crdt.ParseStatus(s.Status)
			if err != nil {
				return nil, where(errorf(protocol.CodeBadRequest, "%v", err))
			}
			e.status = st
		}
		if len(s.Groups) > protocol.MaxGroups {
			return nil, where(errorf(protocol.CodeBadRequest, "at most %d groups", protocol.MaxGroups))
		}
		for _, g := range s.Groups {
			if rerr := checkName("group", g); rerr != nil {
				return nil, where(rerr)
			}
		}
		e.groups = crdt.NormalizeGroups(slices.Clone(s.Groups))
		if s.Meta != nil {
			meta, rerr := checkMeta(s.Meta)
			if rerr != nil {
				return nil, where(rerr)
			}
			e.meta = meta
		}
	}
	return out, nil
}

// checkBackend refuses track and untrack to a token without the backend
// grant.
func checkBackend(c *conn, op string) *requestError {
	if c.sessionGrants().Backend() {
		return nil
	}
	return errorf(protocol.CodeForbidden, "the token does not allow %s (grant backend in rollcall)", op)
}

// trackingLocked returns c's trackSet, made on first use, or refuses a
// connection that no longer owns its own session or is closing. The
// caller holds n.mu.
func (n *Node) trackingLocked(c *conn) (*trackSet, *requestError) {
	if _, rerr := n.ownedLocked(c); rerr != nil {
		return nil, rerr
	}
	if c.state.Load() == stateClosing {
		// Its sessions are ending (endConnSession): none may join them.
		return nil, errorf(protocol.CodeShuttingDown, "the connection is closing")
	}
	if c.tracks == nil {
		c.tracks = &trackSet{}
	}
	return c.tracks, nil
}

// allowTrackLocked takes k sessions from ts's allowance at mono time now,
// or refuses the request.
func (n *Node) allowTrackLocked(ts *trackSet, now int64, k int) *requestError {
	lim := n.limits.Load()
	ok, wait := ts.bucket.allowN(now, lim.TrackRate, lim.TrackBurst, k)
	if ok {
		return nil
	}
	n.stats.rateLimited.Add(1)
	return errorf(protocol.CodeRateLimited, "at most %g sessions tracked or untracked per second (%d at once) per connection; %d more are allowed in %dms",
		lim.TrackRate, lim.TrackBurst, k, max(wait.Milliseconds(), 1))
}

// handleTrack opens or updates the sessions of a track request, owned by
// this gateway and tied to c's liveness.
func (n *Node) handleTrack(c *conn, req *protocol.Request) (any, *requestError) {
	if rerr := checkBackend(c, protocol.OpTrack); rerr != nil {
		return nil, rerr
	}
	entries, rerr := parseTrack(req, false)
	if rerr != nil {
		return nil, rerr
	}
	now := n.clock.Now()
	mono := n.monoAt(now)
	lk := lockOf(&n.mu)
	defer lk.unlock()
	n.underLockHook(req)
	ts, rerr := n.trackingLocked(c)
	if rerr != nil {
		lk.unlock()
		return nil, rerr
	}
	self := crdt.Key{User: c.sess.user, Device: c.sess.device}
	fresh := 0
	for i := range entries {
		if entries[i].key == self {
			lk.unlock()
			return nil, errorf(protocol.CodeBadRequest, "sessions[%d]: %s is this connection's own session", i, truncate(self.String(), 64))
		}
		if t := n.tracked[entries[i].key]; t == nil || t.owner != c {
			fresh++
		}
	}
	if max := n.limits.Load().MaxTrackedPerConnection; max > 0 && ts.count+fresh > max {
		lk.unlock()
		return nil, errorf(protocol.CodeBadRequest, "this connection tracks %d sessions and the request adds %d: at most %d per connection (--max-tracked-per-connection)",
			ts.count, fresh, max)
	}
	if rerr := n.allowTrackLocked(ts, mono, len(entries)); rerr != nil {
		lk.unlock()
		return nil, rerr
	}
	results := make([]protocol.TrackResult, len(entries))
	deltas := make([]crdt.Delta, 0, len(entries))
	var superseded []*conn
	for i := range entries {
		e := &entries[i]
		r := &results[i]
		r.User, r.Device = e.key.User, e.key.Device
		d, wrote, rerr := n.trackOneLocked(c, ts, e, r, now, &superseded)
		if rerr != nil {
			r.Code, r.Message = rerr.code, rerr.msg
			continue
		}
		if wrote {
			deltas = append(deltas, d)
		}
	}
	n.unlockAndPublish(&lk, deltas)
	for _, old := range superseded {
		n.stats.superseded.Add(1)
		old.closeWithError(nil, protocol.CodeSuperseded, "a backend's track took this session")
	}
	return protocol.TrackReply{Op: protocol.OpTracked, ID: req.ID, Sessions: results}, nil
}

// trackOneLocked opens e as a session c tracks, or updates the one c
// tracks already, and fills r with its id and epoch. It returns the delta
// when it wrote one; a refusal of this session alone (epoch_exhausted,
// too_many_sessions) as an error. Local connections the new session
// supersedes are added to superseded, to be closed once mu is released.
func (n *Node) trackOneLocked(c *conn, ts *trackSet, e *trackEntry, r *protocol.TrackResult, now time.Time, superseded *[]*conn) (crdt.Delta, bool, *requestError) {
	rec := crdt.OwnedSession{User: e.key.User, Device: e.key.Device, Status: e.status, Groups: e.groups, Meta: e.meta}
	if t := n.tracked[e.key]; t != nil && t.owner == c {
		cur, ok := n.replica.Session(e.key)
		if ok && cur.Origin == n.origin && cur.Epoch == t.epoch && cur.State == crdt.StateActive {
			r.Session, r.Epoch = cur.ID, cur.Epoch
			if cur.Status == e.status && slices.Equal(cur.Groups, e.groups) && cur.Meta == e.meta {
				return crdt.Delta{}, false, nil
			}
			rec.ID, rec.Epoch = cur.ID, cur.Epoch
			d, err := n.replica.PutLocal(rec.Record(crdt.StateActive, now.UnixNano(), n.cfg.Timeout), now.UnixNano())
			if err != nil {
				n.log.Error("tracked session write failed", zap.String("key", e.key.String()), zap.Error(err))
				return crdt.Delta{}, false, errorf(protocol.CodeInternal, "could not write the session")
			}
			n.markDirtyLocked(e.key.User)
			return d, true, nil
		}
		// Not ours any more (cannot happen: a newer record unlinks it).
		n.unlinkTrackedLocked(t)
	}
	if rerr := n.trackCapLocked(e.key); rerr != nil {
		return crdt.Delta{}, false, rerr
	}
	epoch, err := crdt.NextEpoch(n.replica.MaxEpoch(e.key), 0, now.UnixNano())
	if exh, ok := errors.AsType[*crdt.EpochExhaustedError](err); ok {
		return crdt.Delta{}, false, errorf(protocol.CodeEpochExhausted, "no newer epoch exists for %s: it holds epoch %d and the largest is %d; track another device name",
			truncate(e.key.String(), 64), exh.Held, uint64(protocol.MaxEpoch))
	}
	rec.ID, rec.Epoch = "ses_"+randomHex(8), epoch
	d, err := n.replica.PutLocal(rec.Record(crdt.StateActive, now.UnixNano(), n.cfg.Timeout), now.UnixNano())
	if err != nil {
		n.log.Error("tracked session write failed", zap.String("key", e.key.String()), zap.Error(err))
		return crdt.Delta{}, false, errorf(protocol.CodeInternal, "could not open the session")
	}
	if t := n.tracked[e.key]; t != nil {
		n.unlinkTrackedLocked(t) // another connection's: superseded
		n.stats.superseded.Add(1)
	}
	if old := n.local[e.key.User][e.key.Device]; old != nil {
		n.unregisterLocked(old)
		*superseded = append(*superseded, old)
	}
	t := &trackedSession{key: e.key, epoch: epoch, owner: c, next: ts.head}
	if ts.head != nil {
		ts.head.prev = t
	}
	ts.head = t
	ts.count++
	n.tracked[e.key] = t
	n.markDirtyLocked(e.key.User)
	n.stats.sessionsOpened.Add(1)
	r.Session, r.Epoch = rec.ID, epoch
	return d, true, nil
}

// trackCapLocked is sessionCapLocked for a tracked session of key.
func (n *Node) trackCapLocked(key crdt.Key) *requestError {
	max := n.limits.Load().MaxSessionsPerUser
	if max <= 0 {
		return nil
	}
	held := n.replica.ActiveSessionCount(key.User)
	if held < max {
		return nil
	}
	if cur, ok := n.replica.Session(key); ok && cur.State == crdt.StateActive {
		return nil
	}
	n.stats.tooManySessions.Add(1)
	return errorf(protocol.CodeTooManySessions, "user %s holds %d active sessions, the most allowed", truncate(key.User, 64), held)
}

// handleUntrack ends sessions c tracks, disconnected.
func (n *Node) handleUntrack(c *conn, req *protocol.Request) (any, *requestError) {
	if rerr := checkBackend(c, protocol.OpUntrack); rerr != nil {
		return nil, rerr
	}
	entries, rerr := parseTrack(req, true)
	if rerr != nil {
		return nil, rerr
	}
	now := n.clock.Now()
	mono := n.monoAt(now)
	lk := lockOf(&n.mu)
	defer lk.unlock()
	ts, rerr := n.trackingLocked(c)
	if rerr != nil {
		lk.unlock()
		return nil, rerr
	}
	if rerr := n.allowTrackLocked(ts, mono, len(entries)); rerr != nil {
		lk.unlock()
		return nil, rerr
	}
	results := make([]protocol.TrackResult, len(entries))
	var deltas []crdt.Delta
	for i := range entries {
		r := &results[i]
		r.User, r.Device = entries[i].key.User, entries[i].key.Device
		t := n.tracked[entries[i].key]
		if t == nil || t.owner != c {
			continue
		}
		if ds, id, ok := n.endTrackedLocked(t, crdt.StateDisconnected, now, now.UnixNano()); ok {
			deltas = append(deltas, ds...)
			r.Session, r.Epoch = id, t.epoch
		}
	}
	n.unlockAndPublish(&lk, deltas)
	n.stats.m.disconnected(reasonBye, sessionDeltas(deltas))
	return protocol.TrackReply{Op: protocol.OpUntracked, ID: req.ID, Sessions: results}, nil
}

// endTrackedLocked writes a tracked session ended (st) at clock time now,
// its owner's last request at lastActive (Unix nanoseconds), and forgets
// it, and writes now to the user's last-seen register. It returns the
// deltas (the session's, then the last seen's) and the session's id,
// unless the replica holds a newer record for the key (no write).
func (n *Node) endTrackedLocked(t *trackedSession, st crdt.State, now time.Time, lastActive int64) ([]crdt.Delta, string, bool) {
	n.unlinkTrackedLocked(t)
	cur, ok := n.replica.Session(t.key)
	if !ok || cur.Origin != n.origin || cur.Epoch != t.epoch || cur.State != crdt.StateActive {
		return nil, "", false
	}
	cur.State = st
	cur.ExpiresAt = crdt.ExpiryDeadline(lastActive, n.cfg.Timeout)
	d, err := n.replica.PutLocal(cur, now.UnixNano())
	if err != nil {
		if !errors.Is(err, crdt.ErrSuperseded) {
			n.log.Error("tracked session end write failed", zap.String("key", t.key.String()), zap.Error(err))
		}
		return nil, "", false
	}
	return n.appendLastSeenLocked(append(make([]crdt.Delta, 0, 2), d), t.key.User, now), cur.ID, true
}

// unlinkTrackedLocked forgets a tracked session (without a write) and
// marks its user dirty.
func (n *Node) unlinkTrackedLocked(t *trackedSession) {
	ts := t.owner.tracks
	if t.prev != nil {
		t.prev.next = t.next
	} else {
		ts.head = t.next
	}
	if t.next != nil {
		t.next.prev = t.prev
	}
	t.prev, t.next = nil, nil
	ts.count--
	delete(n.tracked, t.key)
	n.markDirtyLocked(t.key.User)
	n.signalHandoverLocked()
}

// endTracked ends every session c tracks, in state st (disconnected or
// expired), in batches of endTrackedBatch writes per hold of mu, and
// counts them. reason is the disconnect counter index (metrics.go) of a
// disconnect.
func (n *Node) endTracked(c *conn, st crdt.State, reason int) {
	ended := 0
	for {
		now := n.clock.Now()
		lk := lockOf(&n.mu)
		ts := c.tracks
		if ts == nil || ts.head == nil {
			lk.unlock()
			break
		}
		lastActive := now.UnixNano() - (n.monoAt(now) - c.lastActive.Load())
		deltas := make([]crdt.Delta, 0, 2*min(ts.count, endTrackedBatch))
		for k := 0; k < endTrackedBatch && ts.head != nil; k++ {
			if ds, _, ok := n.endTrackedLocked(ts.head, st, now, lastActive); ok {
				deltas = append(deltas, ds...)
				ended++
			}
		}
		n.unlockAndPublish(&lk, deltas)
	}
	if ended == 0 {
		return
	}
	if st == crdt.StateExpired {
		n.stats.expired.Add(uint64(ended))
	} else {
		n.stats.m.disconnected(reason, ended)
	}
	n.log.Debug("tracked sessions ended", zap.Uint64("conn", c.id), zap.Stringer("state", st), zap.Int("sessions", ended))
}

// lostTrackedLocked forgets the tracked sessions whose (user, device) the
// replica now holds a newer record of (another gateway's, or a newer
// epoch): they were superseded. It looks at keys, when not nil (the keys of
// the records merged), else at every device of the touched users.
func (n *Node) lostTrackedLocked(touched map[string]struct{}, keys []crdt.Key) {
	if len(n.tracked) == 0 {
		return
	}
	if keys != nil {
		for _, k := range keys {
			t := n.tracked[k]
			if t == nil {
				continue
			}
			if s, ok := n.replica.Session(k); ok && s.Origin == n.origin && s.Epoch == t.epoch && s.State == crdt.StateActive {
				continue
			}
			n.unlinkTrackedLocked(t)
			n.stats.superseded.Add(1)
		}
		return
	}
	for u := range touched {
		for _, s := range n.replica.UserSessions(u) {
			t := n.tracked[crdt.Key{User: u, Device: s.Device}]
			if t == nil || (s.Origin == n.origin && s.Epoch == t.epoch && s.State == crdt.StateActive) {
				continue
			}
			n.unlinkTrackedLocked(t)
			n.stats.superseded.Add(1)
		}
	}
}

// dropTrackedLocked forgets the tracked session of key, if any, without
// a write: a newer epoch of it was written here.
func (n *Node) dropTrackedLocked(key crdt.Key) {
	if t := n.tracked[key]; t != nil {
		n.unlinkTrackedLocked(t)
		n.stats.superseded.Add(1)
	}
}

// endAllTrackedLocked writes every tracked session disconnected (Drain)
// and returns the deltas.
func (n *Node) endAllTrackedLocked(now time.Time) []crdt.Delta {
	var deltas []crdt.Delta
	for _, t := range n.tracked {
		if ds, _, ok := n.endTrackedLocked(t, crdt.StateDisconnected, now, now.UnixNano()); ok {
			deltas = append(deltas, ds...)
		}
	}
	return deltas
}

// heldCountLocked is how many sessions this gateway owns: its
// connections' and the tracked ones.
func (n *Node) heldCountLocked() int { return n.localCount + len(n.tracked) }

// signalHandoverLocked tells Drain's wait that the last held session is
// gone, when it is.
func (n *Node) signalHandoverLocked() {
	if n.holding && n.heldCountLocked() == 0 {
		select {
		case n.handedOver <- struct{}{}:
		default:
		}
	}
}

// TrackedCount returns how many sessions this gateway's connections track.
func (n *Node) TrackedCount() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.tracked)
}
