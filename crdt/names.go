package crdt

import (
	"hash/maphash"
	"strings"
)

// nameTable holds the strings of a replica's session records (user, device
// and group names, session IDs) without a Go pointer per string: their
// bytes sit in one arena, and a record names a string by a 32-bit ID. A
// replica of a large cluster holds millions of records; held as Go strings
// they would cost a header and an allocation each and give the collector a
// pointer each to trace on every cycle.
//
// User, device and group names are interned: one ID per distinct name,
// refcounted by the records (and group sets) that use it, found by hash.
// Session IDs are unique per connection, so they are stored without
// interning (not in the hash index). A name is released when its last
// holder goes, so churned names do not accumulate: its ID is reused and
// its bytes become garbage in the arena, which is rewritten once garbage
// is most of it.
type nameTable struct {
	arena   []byte
	garbage int // bytes of released names in arena
	recs    []nameRec
	free    []nameID // released IDs, reused first
	// slots is an open-addressing hash index of the interned names
	// (linear probing, 0 empty), a power of two long; interned counts them.
	slots    []nameID
	interned int
	seed     maphash.Seed
}

// nameID names a string of a nameTable; 0 is none.
type nameID uint32

type nameRec struct {
	off  uint32 // of the bytes in arena
	hash uint32 // low bits of the name's hash; meaningless unless interned
	refs uint32 // 0: free
	n    uint16 // length in bytes (at most MaxNameLen)
	// interned is set for names in the hash index; session IDs are not.
	interned bool
	// head is, for a user name, the first record of the user's chain of
	// session records (replica.go); 0 for none.
	head recID
	// single is, for a group name, the group set of that group alone when
	// held (groupsets.go): most records join one group, and a merge then
	// finds its set without a map lookup.
	single setID
}

// nameArenaMinGarbage is the garbage below which the arena is never
// rewritten: compacting a small arena saves nothing worth the copy.
const nameArenaMinGarbage = 64 << 10

func newNameTable() nameTable {
	return nameTable{recs: make([]nameRec, 1), seed: maphash.MakeSeed()}
}

func (t *nameTable) hash(s string) uint32 { return uint32(maphash.String(t.seed, s)) }

// bytes returns the bytes of a name; valid until the next add or release.
func (t *nameTable) bytes(id nameID) []byte {
	r := &t.recs[id]
	return t.arena[r.off : r.off+uint32(r.n)]
}

// str returns a name as a new string.
func (t *nameTable) str(id nameID) string {
	if id == 0 {
		return ""
	}
	return string(t.bytes(id))
}

// equal reports whether name id is s.
func (t *nameTable) equal(id nameID, s string) bool {
	return string(t.bytes(id)) == s // no allocation: the compiler compares in place
}

// compare compares name id with s, as strings.Compare.
func (t *nameTable) compare(id nameID, s string) int {
	return strings.Compare(string(t.bytes(id)), s)
}

// lookup returns the ID of an interned name, or 0.
func (t *nameTable) lookup(s string) nameID {
	if t.interned == 0 {
		return 0
	}
	id, _ := t.find(s, t.hash(s))
	return id
}

// find returns the ID of interned name s with hash h, or 0 and the free
// slot where it would go.
func (t *nameTable) find(s string, h uint32) (nameID, int) {
	mask := uint32(len(t.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		id := t.slots[i]
		if id == 0 {
			return 0, int(i)
		}
		if r := &t.recs[id]; r.hash == h && int(r.n) == len(s) && t.equal(id, s) {
			return id, int(i)
		}
	}
}

// intern returns the ID of s, adding it if new, and takes a reference to
// it. s must be at most MaxNameLen bytes, or for a session's meta or info
// their limits (Validate checks): under 64 KiB.
func (t *nameTable) intern(s string) nameID {
	if 4*(t.interned+1) > 3*len(t.slots) {
		t.growSlots()
	}
	h := t.hash(s)
	id, slot := t.find(s, h)
	if id != 0 {
		t.recs[id].refs++
		return id
	}
	id = t.add(s)
	r := &t.recs[id]
	r.hash, r.interned = h, true
	t.slots[slot] = id
	t.interned++
	return id
}

// take takes a reference to name s, whose ID lookup returned: id, or 0
// when s is not held.
func (t *nameTable) take(id nameID, s string) nameID {
	if id == 0 {
		return t.intern(s)
	}
	t.recs[id].refs++
	return id
}

// store adds s without interning it (a session ID) with one reference.
func (t *nameTable) store(s string) nameID { return t.add(s) }

// add copies s into the arena under a fresh ID with one reference.
func (t *nameTable) add(s string) nameID {
	var id nameID
	if n := len(t.free); n > 0 {
		id = t.free[n-1]
		t.free = t.free[:n-1]
	} else {
		t.recs = append(t.recs, nameRec{})
		id = nameID(len(t.recs) - 1)
	}
	t.recs[id] = nameRec{off: uint32(len(t.arena)), n: uint16(len(s)), refs: 1}
	t.arena = append(t.arena, s...)
	return id
}

// release drops a reference to a name, removing it with its last.
func (t *nameTable) release(id nameID) {
	r := &t.recs[id]
	if r.refs--; r.refs > 0 {
		return
	}
	if r.interned {
		t.unindex(id)
	}
	t.garbage += int(r.n)
	*r = nameRec{}
	t.free = append(t.free, id)
	if t.garbage >= nameArenaMinGarbage && 2*t.garbage > len(t.arena) {
		t.compact()
	}
	if len(t.free) == len(t.recs)-1 {
		// Empty: start over, so a replica that emptied holds nothing.
		t.recs, t.free, t.arena, t.garbage = t.recs[:1], nil, nil, 0
	}
}

// unindex removes an interned name from the hash index, moving back the
// slots after it that would otherwise no longer be found from their home.
func (t *nameTable) unindex(id nameID) {
	mask := uint32(len(t.slots) - 1)
	hole := t.recs[id].hash & mask
	for t.slots[hole] != id {
		hole = (hole + 1) & mask
	}
	for j := (hole + 1) & mask; t.slots[j] != 0; j = (j + 1) & mask {
		home := t.recs[t.slots[j]].hash & mask
		if (j-home)&mask >= (j-hole)&mask {
			t.slots[hole] = t.slots[j]
			hole = j
		}
	}
	t.slots[hole] = 0
	t.interned--
}

func (t *nameTable) growSlots() {
	t.slots = make([]nameID, max(16, 2*len(t.slots)))
	mask := uint32(len(t.slots) - 1)
	for id := range t.recs {
		r := &t.recs[id]
		if !r.interned {
			continue
		}
		i := r.hash & mask
		for t.slots[i] != 0 {
			i = (i + 1) & mask
		}
		t.slots[i] = nameID(id)
	}
}

// compact rewrites the arena with only the names held.
func (t *nameTable) compact() {
	arena := make([]byte, 0, len(t.arena)-t.garbage)
	for id := range t.recs {
		r := &t.recs[id]
		if r.refs == 0 {
			continue
		}
		off := uint32(len(arena))
		arena = append(arena, t.arena[r.off:r.off+uint32(r.n)]...)
		r.off = off
	}
	t.arena, t.garbage = arena, 0
	if cap(t.free) > 64 && len(t.free) < cap(t.free)/4 {
		t.free = append([]nameID(nil), t.free...)
	}
}

// held returns how many names the table holds.
func (t *nameTable) held() int { return len(t.recs) - 1 - len(t.free) }
