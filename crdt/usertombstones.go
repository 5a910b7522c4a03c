package crdt

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

// capUserTombstones collects the oldest tombstones of user past
// MaxTombstonesPerUser at now; keep, the entry just merged, is never
// collected. It walks the user's entries: O(their number), which the cap
// bounds by the user's active sessions plus the cap.
func (r *Replica) capUserTombstones(user string, keep *entry, now int64) {
	limit := r.cfg.MaxTombstonesPerUser
	if limit <= 0 {
		return
	}
	d := r.byUser.ref(user)
	if d == nil {
		return
	}
	for {
		held := 0
		var oldest *entry
		d.each(func(e *entry) {
			if !r.ended(e.s) {
				return
			}
			held++
			if e != keep && (oldest == nil || e.endedAt < oldest.endedAt ||
				e.endedAt == oldest.endedAt && compareStrings(e.s.Device, oldest.s.Device) < 0) {
				oldest = e
			}
		})
		if held <= limit || oldest == nil {
			return
		}
		// As GC collects a tombstone; its queued tombstone item finds the
		// entry gone and is skipped.
		oldest.st.gcFloor = max(oldest.st.gcFloor, oldest.s.Version)
		r.raiseFloor(oldest.s.Key(), oldest.s.Epoch, now)
		r.removeEntry(oldest)
	}
}
