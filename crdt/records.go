package crdt

// A replica's session records, held compactly: every gateway holds every
// session of the cluster, so the cost of a record is the cost of the
// cluster per gateway. A record is a fixed-size struct without Go pointers
// in pages of a slab, named by a 32-bit recID; its strings are IDs into the
// replica's nameTable and its groups an ID into its groupSets; its origin
// is an index into the replica's origin list (its gateway is its origin's
// node, which Validate enforces). The collector has nothing to trace in
// them. Session values are built from records at the replica's boundary:
// queries, diffs and snapshots.

// recID names a record of the slab; 0 is none.
type recID uint32

// record is one session record as a replica holds it, with its local
// bookkeeping.
type record struct {
	epoch, seq, version uint64
	expiresAt, updated  int64
	// endedAt is the local time this replica first held the record's epoch
	// as terminal; meaningless while active (0 is a valid time: a virtual
	// clock may start there). Tombstone GC counts from it, so owner clock
	// skew cannot shorten a tombstone's life.
	endedAt int64

	user, device, id nameID
	groups           setID
	// origin indexes Replica.originList: the state of the record's origin,
	// whose log names this record.
	origin uint32
	// prev and next chain the records of one user (its head is in the
	// user's name); 0 ends the chain.
	prev, next recID

	state  State
	status Status
	// counted records whether the record is counted as effectively active
	// (census, group index): it was when last indexed.
	counted bool
	live    bool // held; false for a free slot
}

// recPageBits sizes the slab's pages: 4096 records (320 KiB) each, so
// growing the slab past its first page never copies it. The first page
// starts at recFirstPageLen records and doubles up to recFirstPageJump,
// then takes the full size, so a replica holding few sessions (a simulator
// runs thousands of replicas) costs a few hundred bytes of slab, not a
// full page.
const (
	recPageBits      = 12
	recPageLen       = 1 << recPageBits
	recFirstPageLen  = 8
	recFirstPageJump = 512
)

// recSlab holds the records; record 0 is never used.
type recSlab struct {
	// pages hold the records: every page but the first recPageLen long,
	// the first growing (by copying) until it is.
	pages [][]record
	n     int     // slots used, free ones included
	free  []recID // free slots, reused first
}

func (sl *recSlab) at(id recID) *record {
	return &sl.pages[id>>recPageBits][id&(recPageLen-1)]
}

// get returns the record in a slot, or nil for a free slot or none.
func (sl *recSlab) get(id recID) *record {
	if id == 0 || int(id) >= sl.n {
		return nil
	}
	if rec := sl.at(id); rec.live {
		return rec
	}
	return nil
}

// alloc returns a free slot, zeroed and marked live.
func (sl *recSlab) alloc() recID {
	var id recID
	if n := len(sl.free); n > 0 {
		id = sl.free[n-1]
		sl.free = sl.free[:n-1]
	} else {
		if sl.n == 0 {
			sl.n = 1 // slot 0 is none
		}
		switch page, slot := sl.n>>recPageBits, sl.n&(recPageLen-1); {
		case page == len(sl.pages) && page == 0:
			sl.pages = append(sl.pages, make([]record, recFirstPageLen))
		case page == len(sl.pages):
			sl.pages = append(sl.pages, make([]record, recPageLen))
		case slot == len(sl.pages[page]):
			// The first page is full but short: double it, or past
			// recFirstPageJump records take the full size at once, so a
			// replica that grows large leaves little garbage behind. No
			// *record is held across alloc, so moving the records is safe.
			size := 2 * slot
			if size > recFirstPageJump {
				size = recPageLen
			}
			grown := make([]record, size)
			copy(grown, sl.pages[page])
			sl.pages[page] = grown
		}
		id = recID(sl.n)
		sl.n++
	}
	*sl.at(id) = record{live: true}
	return id
}

// release frees a slot.
func (sl *recSlab) release(id recID) {
	*sl.at(id) = record{}
	sl.free = append(sl.free, id)
	if len(sl.free) == sl.n-1 {
		// Empty: give the pages back.
		sl.pages, sl.n, sl.free = nil, 0, nil
	}
}

// each calls f for every live record, in slot order.
func (sl *recSlab) each(f func(recID, *record)) {
	for i := 1; i < sl.n; i++ {
		if rec := sl.at(recID(i)); rec.live {
			f(recID(i), rec)
		}
	}
}

// keyTable indexes records by key, (user, device) name IDs: open
// addressing with linear probing over recIDs (0 empty), a power of two
// long, growing at three quarters full.
type keyTable struct {
	slots []recID
	n     int
}

func keyHash(user, device nameID) uint32 {
	h := (uint64(user)<<32 | uint64(device)) * 0x9E3779B97F4A7C15
	return uint32(h >> 32)
}

// find returns the record of a key, or 0.
func (kt *keyTable) find(sl *recSlab, user, device nameID) recID {
	if kt.n == 0 {
		return 0
	}
	mask := uint32(len(kt.slots) - 1)
	for i := keyHash(user, device) & mask; ; i = (i + 1) & mask {
		id := kt.slots[i]
		if id == 0 {
			return 0
		}
		if rec := sl.at(id); rec.user == user && rec.device == device {
			return id
		}
	}
}

// insert adds a record whose key the table does not hold.
func (kt *keyTable) insert(sl *recSlab, id recID) {
	if 4*(kt.n+1) > 3*len(kt.slots) {
		old := kt.slots
		kt.slots = make([]recID, max(16, 2*len(old)))
		for _, o := range old {
			if o != 0 {
				kt.place(sl, o)
			}
		}
	}
	kt.place(sl, id)
	kt.n++
}

func (kt *keyTable) place(sl *recSlab, id recID) {
	mask := uint32(len(kt.slots) - 1)
	rec := sl.at(id)
	i := keyHash(rec.user, rec.device) & mask
	for kt.slots[i] != 0 {
		i = (i + 1) & mask
	}
	kt.slots[i] = id
}

// remove deletes a held record from the table, moving back the slots after
// it that would otherwise no longer be found from their home.
func (kt *keyTable) remove(sl *recSlab, id recID) {
	mask := uint32(len(kt.slots) - 1)
	rec := sl.at(id)
	hole := keyHash(rec.user, rec.device) & mask
	for kt.slots[hole] != id {
		hole = (hole + 1) & mask
	}
	for j := (hole + 1) & mask; kt.slots[j] != 0; j = (j + 1) & mask {
		o := sl.at(kt.slots[j])
		home := keyHash(o.user, o.device) & mask
		if (j-home)&mask >= (j-hole)&mask {
			kt.slots[hole] = kt.slots[j]
			hole = j
		}
	}
	kt.slots[hole] = 0
	kt.n--
	if kt.n == 0 {
		kt.slots = nil
	}
}

// recExtra is the meta and info of a record (Session.Meta, Session.Info),
// held out of line (Replica.extras): interned names, 0 for none. Most
// records have neither, and the record itself stays the same size.
type recExtra struct {
	meta, info nameID
}

// extrasOf returns a record's meta and info.
func (r *Replica) extrasOf(rec *record) recExtra {
	if len(r.extras) == 0 {
		return recExtra{}
	}
	return r.extras[rec.id]
}

// setExtras gives a record, whose session ID is stored and which holds no
// extras, meta and info (either may be empty).
func (r *Replica) setExtras(rec *record, meta, info string) {
	if meta == "" && info == "" {
		return
	}
	var ex recExtra
	if meta != "" {
		ex.meta = r.names.intern(meta)
	}
	if info != "" {
		ex.info = r.names.intern(info)
	}
	if r.extras == nil {
		r.extras = make(map[nameID]recExtra)
	}
	r.extras[rec.id] = ex
}

// releaseExtras drops a record's meta and info, if any.
func (r *Replica) releaseExtras(rec *record) {
	if len(r.extras) == 0 {
		return
	}
	ex, ok := r.extras[rec.id]
	if !ok {
		return
	}
	delete(r.extras, rec.id)
	if ex.meta != 0 {
		r.names.release(ex.meta)
	}
	if ex.info != 0 {
		r.names.release(ex.info)
	}
	if len(r.extras) == 0 {
		r.extras = nil
	}
}
