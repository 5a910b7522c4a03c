package crdt

// Epoch floors. Collecting a tombstone forgets the highest epoch this
// replica held for its key, but other replicas (which received the record
// later, so collect it later, or joined and got it by anti-entropy) may still
// hold it. A gateway that then allocated 1 + MaxEpoch would issue an epoch
// those replicas refuse, and they would show a live session offline. So GC
// leaves the key's epoch behind as a floor for one more tombstone horizon,
// and MaxEpoch and PutLocal respect it. Memory follows the churn within two
// horizons, not the number of keys ever seen.

// epochFloor is the highest collected epoch of a key and when it lapses.
type epochFloor struct {
	epoch uint64
	until int64
}

// floorItem queues a floor's lapse, FIFO by until.
type floorItem struct {
	key   Key
	until int64
}

// raiseFloor records that an epoch of k was collected at now.
func (r *Replica) raiseFloor(k Key, epoch uint64, now int64) {
	until := now + int64(r.cfg.TombstoneHorizon)
	f := r.floors[k]
	if epoch < f.epoch {
		epoch = f.epoch
	}
	r.floors[k] = epochFloor{epoch: epoch, until: until}
	r.floorQueue = append(r.floorQueue, floorItem{key: k, until: until})
}

// lapseFloors forgets floors whose time has passed.
func (r *Replica) lapseFloors(now int64) int {
	n, lapsed := 0, 0
	for _, it := range r.floorQueue {
		if it.until > now {
			break
		}
		n++
		if f, ok := r.floors[it.key]; ok && f.until == it.until {
			delete(r.floors, it.key)
			lapsed++
		}
	}
	r.floorQueue = r.floorQueue[n:]
	if len(r.floorQueue) == 0 {
		r.floorQueue = nil
	}
	return lapsed
}

// epochFloorOf returns the floor of k, or 0.
func (r *Replica) epochFloorOf(k Key) uint64 { return r.floors[k].epoch }
