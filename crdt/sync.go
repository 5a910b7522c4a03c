package crdt

import "slices"

// Digest returns this replica's watermark for every origin it knows, sorted
// by origin. Its size follows the number of origins (gateway incarnations),
// not the number of records.
func (r *Replica) Digest() Digest {
	d := make(Digest, 0, len(r.byOrigin))
	for _, st := range r.sortedOrigins() {
		d = append(d, DigestEntry{Origin: st.origin, Watermark: st.watermark, Held: st.held()})
	}
	return d
}

// Diff answers a peer's digest with the records the peer lacks: per origin,
// those above the peer's watermark. Its cost follows the number of records
// sent, not the total state. Origins the peer already has to our watermark
// are skipped; origins missing from the peer's digest are always listed, even
// with nothing to send, so the peer learns of new incarnations (and retires
// the old ones) before the new one writes anything.
//
// When the peer lags below what we have garbage collected for some origin
// (its watermark is under our GC floor for it), the answer is a full
// snapshot of every origin, not only of that one: a collected tombstone may
// have superseded records of other origins that the peer still holds (the
// session the user left on another gateway), and only a full snapshot of
// those origins tells the peer to drop them (testdata/crdt/ghost_after_gc.txt).
func (r *Replica) Diff(peer Digest) Sync {
	peerW, peerHeld := peerMaps(peer)
	lagging := r.lagging(peerW, peerHeld)
	var out Sync
	for _, st := range r.sortedOrigins() {
		os, ok := r.diffOrigin(st, peerW, peerHeld, lagging, 0, nil)
		if ok {
			out = append(out, os)
		}
	}
	return out
}

// peerMaps indexes a peer's digest: its watermark and held runs per origin.
func peerMaps(peer Digest) (map[Origin]uint64, map[Origin][]Span) {
	peerW := make(map[Origin]uint64, len(peer))
	peerHeld := make(map[Origin][]Span)
	for _, e := range peer {
		peerW[e.Origin] = e.Watermark
		if len(e.Held) > 0 {
			peerHeld[e.Origin] = e.Held
		}
	}
	return peerW, peerHeld
}

// lagging reports whether a peer with watermarks peerW (and held runs
// peerHeld) lags below what this replica has garbage collected for some
// origin: it then needs a full snapshot of every origin (see Diff).
//
// A peer that holds nothing (a joiner, a gateway restarted empty) is not
// lagging: it has no record a snapshot would need to drop, so what it lacks
// is every record above watermark 0, which a paged answer can carry.
func (r *Replica) lagging(peerW map[Origin]uint64, peerHeld map[Origin][]Span) bool {
	if emptyPeer(peerW, peerHeld) {
		return false
	}
	for st := range r.allOrigins() {
		// A floor above our own watermark (a collected record in a pending
		// range) is not something we can vouch for; comparing with the lower
		// of the two keeps a peer level with us from being sent a full
		// snapshot on every round. Nor is an origin whose sessions we
		// purged: we hold none of them, so a snapshot of ours is not the
		// origin's state.
		if st.purged {
			continue
		}
		if pw := peerW[st.origin]; pw < st.gcFloor && pw < st.watermark {
			return true
		}
	}
	return false
}

// emptyPeer reports whether a peer's digest (its watermarks peerW and the
// runs it holds above them, peerHeld) says it holds no record.
func emptyPeer(peerW map[Origin]uint64, peerHeld map[Origin][]Span) bool {
	if len(peerHeld) > 0 {
		return false
	}
	for _, w := range peerW {
		if w > 0 {
			return false
		}
	}
	return true
}

// diffOrigin builds one origin's part of an answer: its records above the
// peer's watermark (or all of them when lagging) and above after, outside
// the runs the peer holds. take, if not nil, is asked before each record is
// taken and stops the walk by returning false. ok is false when the origin
// has nothing to tell the peer.
func (r *Replica) diffOrigin(st *originState, peerW map[Origin]uint64, peerHeld map[Origin][]Span, lagging bool,
	after uint64, take func(it logItem) bool) (os OriginSync, ok bool) {
	o := st.origin
	pw, known := peerW[o]
	w := st.watermark
	if st.purged {
		w = 0 // see below
	}
	if known && !lagging && w <= pw && st.maxVersion() <= pw {
		return OriginSync{}, false
	}
	os = OriginSync{Origin: o, Watermark: st.watermark, GCFloor: st.gcFloor, Full: lagging}
	if st.purged {
		// Our watermark covers sessions we purged: vouching for it
		// would make the peer drop or never ask for records its owner
		// still holds (testdata/crdt/purge_peer.txt). We send what we have,
		// the account records, and claim nothing.
		os.Watermark, os.GCFloor = 0, 0
	}
	from := pw + 1
	held := peerHeld[o]
	if lagging {
		from, held = 0, nil
	}
	from = max(from, after+1)
	stopped := false
	add := func(it logItem) bool {
		if take != nil && !take(it) {
			stopped = true
			return false
		}
		switch it.kind {
		case itemAccount:
			os.Accounts = append(os.Accounts, *r.acctSlots[it.ref])
		case itemLastSeen:
			os.LastSeen = append(os.LastSeen, r.lastSeenWrite(it.ref))
		default:
			os.Sessions = append(os.Sessions, r.session(r.recs.at(recID(it.ref)), "", ""))
		}
		return true
	}
	// Only the gaps between the runs the peer holds above its
	// watermark: the walk costs what is sent, not what is skipped.
	for _, sp := range held {
		if stopped {
			break
		}
		if sp.Through < from {
			continue
		}
		if sp.After >= from {
			st.log.AscendRange(from, sp.After, add)
		}
		from = sp.Through + 1
	}
	if !stopped {
		st.log.AscendGreaterOrEqual(from, add)
	}
	return os, true
}

// ApplySync merges a peer's answer to our digest at local time now and
// returns the users whose records changed, sorted.
func (r *Replica) ApplySync(s Sync, now int64) ([]string, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	var users []string
	admitted := make([]*originState, len(s))
	for i := range s {
		ok, _, dropped := r.admit(r.nodeOf(s[i].Origin.Node), s[i].Origin, now)
		users = append(users, dropped...)
		if ok {
			admitted[i] = r.originState(s[i].Origin)
		}
	}
	// Drop what a full snapshot lacks before merging anything: a record
	// the sender no longer has may be the one that made us refuse one of
	// the records it sends for another origin (testdata/crdt/full_sync_order.txt).
	for i := range s {
		if st := admitted[i]; st != nil && s[i].Full {
			users = append(users, r.dropMissing(st, &s[i])...)
		}
	}
	var got []uint64
	for i := range s {
		os, st := &s[i], admitted[i]
		if st == nil {
			continue
		}
		// A full snapshot's records all merge, even those at or below our
		// watermark: we may have refused one because of a record the
		// snapshot just dropped.
		w := st.watermark
		got = got[:0]
		for j := range os.Sessions {
			rec := &os.Sessions[j]
			if (os.Full || rec.Version > w) && r.mergeSession(st, rec, now) {
				users = append(users, rec.User)
			}
			if rec.Version > w {
				got = append(got, rec.Version)
			}
		}
		for j := range os.Accounts {
			if (os.Full || os.Accounts[j].Version > w) && r.applySyncAccount(&os.Accounts[j], now) {
				users = append(users, os.Accounts[j].User)
			}
			if os.Accounts[j].Version > w {
				got = append(got, os.Accounts[j].Version)
			}
		}
		for j := range os.LastSeen {
			if (os.Full || os.LastSeen[j].Version > w) && r.mergeLastSeen(&os.LastSeen[j], now) {
				users = append(users, os.LastSeen[j].User)
			}
			if os.LastSeen[j].Version > w {
				got = append(got, os.LastSeen[j].Version)
			}
		}
		st.raise(os.Watermark)
		st.gcFloor = max(st.gcFloor, os.GCFloor)
		// Each record sent above the watermark is now held, or a record
		// that dominates it is: its version is covered whatever the
		// sender could vouch for around it (a sender's own watermark may
		// be below what it sends, or a page may claim nothing: DiffPage),
		// so the next digest does not ask for it again.
		st.coverVersions(got, r.cfg.MaxPendingRanges)
	}
	return sortedUnique(users), nil
}

func (r *Replica) applySyncAccount(a *Account, now int64) bool {
	r.hlc.Observe(now, a.Stamp)
	return r.mergeAccount(a)
}

// dropMissing removes our records of a full snapshot's origin, at or below
// its watermark (or, for a page of a paged snapshot, in its drop range),
// that the snapshot lacks: the sender collected or purged them, or holds a
// record that replaced them (sent in the snapshot of its own origin, and
// merged after this). Account records are never collected, so an account
// the sender lacks is one it saw replaced; it goes too, or a replica that
// was cut off past the horizon could keep for ever the only copy of a
// retired incarnation's last write, which the others have given up for
// lost (see GC).
func (r *Replica) dropMissing(st *originState, os *OriginSync) []string {
	after, through := uint64(0), os.Watermark
	var keep []Span
	if d := os.Drop; d != nil {
		after, through, keep = d.After, d.Through, d.Keep
	}
	if through <= after {
		return nil
	}
	present := make(map[uint64]struct{}, len(os.Sessions)+len(os.Accounts)+len(os.LastSeen))
	for j := range os.Sessions {
		present[os.Sessions[j].Version] = struct{}{}
	}
	for j := range os.Accounts {
		present[os.Accounts[j].Version] = struct{}{}
	}
	for j := range os.LastSeen {
		present[os.LastSeen[j].Version] = struct{}{}
	}
	var victims []logItem
	st.log.AscendRange(after+1, through, func(it logItem) bool {
		for len(keep) > 0 && keep[0].Through < it.version {
			keep = keep[1:]
		}
		if len(keep) > 0 && keep[0].After < it.version {
			return true // kept: the sender holds it
		}
		if _, ok := present[it.version]; !ok {
			victims = append(victims, it)
		}
		return true
	})
	var users []string
	for _, it := range victims {
		st.gcFloor = max(st.gcFloor, it.version)
		switch it.kind {
		case itemAccount:
			user := r.acctSlots[it.ref].User
			st.log.Delete(it)
			r.removeAccount(user)
			users = append(users, user)
			continue
		case itemLastSeen:
			user := r.names.str(r.lastSeen.slots[it.ref].user)
			st.log.Delete(it)
			r.removeLastSeen(it.ref)
			users = append(users, user)
			continue
		}
		rec := r.recs.at(recID(it.ref))
		if rec.counted {
			users = append(users, r.names.str(rec.user))
		}
		r.removeRecord(recID(it.ref))
	}
	return users
}

// SetNodeDown marks a gateway as failed in this replica's projection at
// local time now: its active sessions are shown expired, without writing
// over its records, so a false suspicion heals with SetNodeUp. It returns the
// users whose presence changed.
func (r *Replica) SetNodeDown(node string, now int64) []string {
	if node == r.cfg.Self.Node {
		return nil
	}
	ns := r.nodeOf(node)
	if ns.down {
		return nil
	}
	ns.down, ns.downSince = true, now
	r.down[node] = ns
	users := r.recountNode(ns)
	r.noteShown(users, now)
	return users
}

// SetNodeUp clears a SetNodeDown: the node was heard from again. If GC
// purged the sessions of its current incarnation meanwhile (it was down, or
// falsely suspected, past the purge horizon), this replica gives up the
// watermark it keeps for them: its digest then asks for the incarnation's
// records again, and anti-entropy brings back those still live instead of
// leaving them lost here until their owner writes them again
// (testdata/crdt/purge.txt).
func (r *Replica) SetNodeUp(node string) []string {
	ns := r.nodes.get(node)
	if ns == nil || !ns.down {
		return nil
	}
	ns.down, ns.downSince = false, 0
	delete(r.down, node)
	for _, st := range ns.origins {
		if !st.purged {
			continue
		}
		st.purged = false
		if !ns.retired(st.origin.Incarnation) {
			st.watermark, st.pending = 0, nil
		}
	}
	return r.recountNode(ns)
}

// NodeDown reports whether node is marked down, and since when.
func (r *Replica) NodeDown(node string) (since int64, down bool) {
	if ns := r.nodes.get(node); ns != nil && ns.down {
		return ns.downSince, true
	}
	return 0, false
}

// recountNode re-evaluates every session record whose gateway is the node
// of ns, in one pass over that node's origins.
func (r *Replica) recountNode(ns *nodeState) []string {
	var users []string
	for _, st := range ns.origins {
		st.log.Ascend(func(it logItem) bool {
			if it.kind == itemSession {
				rec := r.recs.at(recID(it.ref))
				before := rec.counted
				r.recount(rec)
				if rec.counted != before {
					users = append(users, r.names.str(rec.user))
				}
			}
			return true
		})
	}
	return sortedUnique(users)
}

// GCStats reports what one GC pass removed.
type GCStats struct {
	Tombstones int // ended sessions past the tombstone horizon
	Purged     int // sessions of nodes down past the purge horizon
	// FloorsLapsed counts epoch floors of collected tombstones forgotten
	// after their horizon.
	FloorsLapsed int
	// LastSeen counts last-seen registers emptied: past LastSeenRetention.
	LastSeen int
}

// GC removes tombstones older than the tombstone horizon, the sessions of
// nodes that have been down longer than the purge horizon and, a slice of
// them each pass, last-seen registers past their retention. None changes
// any user's presence: the first two were already shown offline, and
// Presence no longer shows a last seen past retention.
func (r *Replica) GC(now int64) GCStats {
	var stats GCStats
	horizon := int64(r.cfg.TombstoneHorizon)
	n := 0
	for _, t := range r.tombstones {
		if now-t.endedAt < horizon {
			break
		}
		n++
		rec := r.recs.get(t.rec)
		if rec == nil || rec.origin != t.origin || rec.version != t.version || !r.ended(rec) {
			continue // replaced since; its own tombstone (if any) is queued
		}
		st := r.originList[rec.origin]
		st.gcFloor = max(st.gcFloor, rec.version)
		if st.retired() {
			// A retired incarnation never fills the gaps below its
			// last writes, so its watermark would stay below what
			// we collect forever: every anti-entropy round would
			// resend what lies above it, and a peer that lagged past
			// our GC floor would never be found lagging (Diff
			// compares with the lower of the two). A horizon after
			// this record arrived, anything of the gaps that any
			// replica held has reached us; the rest is lost with
			// the incarnation.
			st.raise(rec.version)
		}
		r.raiseFloor(r.keyOf(rec), rec.epoch, now)
		r.removeRecord(t.rec)
		stats.Tombstones++
	}
	stats.FloorsLapsed = r.lapseFloors(now)
	stats.LastSeen = r.collectLastSeen(now)
	r.tombstones = slices.Delete(r.tombstones, 0, n)
	if cap(r.tombstones) > 1024 && len(r.tombstones) < cap(r.tombstones)/4 {
		r.tombstones = slices.Clip(slices.Clone(r.tombstones))
	}
	purge := int64(r.cfg.PurgeHorizon)
	for _, ns := range r.down {
		if now-ns.downSince < purge {
			continue
		}
		for _, st := range ns.origins {
			before := st.log.Len()
			r.dropSessions(st, now)
			st.purged = true
			stats.Purged += before - st.log.Len()
			st.gcFloor = max(st.gcFloor, st.watermark)
		}
	}
	return stats
}
