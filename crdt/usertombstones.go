package crdt

import "bytes"

// Tombstones per user. A client that reconnects with a new device name
// each time (or a token holder doing so on purpose) leaves one tombstone
// per connection for the tombstone horizon: thousands for one user within
// minutes, each walked by every query of that user. So a replica keeps at
// most MaxTombstonesPerUser of a user's tombstones and collects the oldest
// (the earliest to have ended here) as GC would, leaving its epoch behind
// as a floor (epochfloor.go), so the key's next epoch is still issued
// above it. Collecting early shortens the time a late delta of that
// session would have found its tombstone, as GC at the horizon does for
// deltas later than the horizon: it is the user's own churn that is cut.

// capUserTombstones collects the oldest tombstones of keep's user past
// MaxTombstonesPerUser at now; keep, the record just merged, is never
// collected. It walks the user's records: O(their number), which the cap
// bounds by the user's active sessions plus the cap.
func (r *Replica) capUserTombstones(keep recID, now int64) {
	limit := r.cfg.MaxTombstonesPerUser
	if limit <= 0 {
		return
	}
	u := r.recs.at(keep).user
	for {
		held := 0
		var oldest recID
		for id := r.names.recs[u].head; id != 0; id = r.recs.at(id).next {
			rec := r.recs.at(id)
			if !r.ended(rec) {
				continue
			}
			held++
			if id == keep {
				continue
			}
			if oldest == 0 {
				oldest = id
				continue
			}
			o := r.recs.at(oldest)
			if rec.endedAt < o.endedAt || rec.endedAt == o.endedAt &&
				bytes.Compare(r.names.bytes(rec.device), r.names.bytes(o.device)) < 0 {
				oldest = id
			}
		}
		if held <= limit || oldest == 0 {
			return
		}
		// As GC collects a tombstone; its queued tombstone item finds the
		// record gone (or another in its slot) and is skipped.
		rec := r.recs.at(oldest)
		st := r.originList[rec.origin]
		st.gcFloor = max(st.gcFloor, rec.version)
		r.raiseFloor(r.keyOf(rec), rec.epoch, now)
		r.removeRecord(oldest)
	}
}
