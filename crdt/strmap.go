package crdt

import (
	"hash/maphash"
	"iter"
)

// strMap is a hash map from strings to V for the replica's hot indexes (the
// node table and the user index): open addressing with linear probing, each
// slot holding its key's hash, the key and the value together.
//
// Apply looks up a node and a user on every merge, and in a large cluster's
// simulator ten thousand replicas take turns, so the replica is cold in the
// cache when a delta reaches it and each dependent load is a miss. A Go
// map's lookup follows its header, directory, table and group before it
// reaches a slot; here the first load is the slot, which holds the value.
// Deletion shifts the following slots back (no tombstones), and the table
// grows at three quarters full and never shrinks, as a Go map.
//
// The hash is seeded per map (hash/maphash), so clients choosing user names
// cannot make them collide into one long probe run. Iteration order is fixed
// per map and not meaningful.
type strMap[V any] struct {
	slots []strSlot[V] // a power of two long, or empty
	n     int
	seed  maphash.Seed
}

type strSlot[V any] struct {
	hash uint64 // of key, with the low bit set; 0 marks an empty slot
	key  string
	val  V
}

func newStrMap[V any]() strMap[V] { return strMap[V]{seed: maphash.MakeSeed()} }

func (m *strMap[V]) hash(key string) uint64 { return maphash.String(m.seed, key) | 1 }

// find returns the slot of key, or -1.
func (m *strMap[V]) find(key string) int {
	if m.n == 0 {
		return -1
	}
	h := m.hash(key)
	mask := uint64(len(m.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := &m.slots[i]
		if s.hash == h && s.key == key {
			return int(i)
		}
		if s.hash == 0 {
			return -1
		}
	}
}

// get returns key's value, or the zero V.
func (m *strMap[V]) get(key string) V {
	if i := m.find(key); i >= 0 {
		return m.slots[i].val
	}
	var zero V
	return zero
}

// ref returns a pointer to key's value in its slot, or nil. It is valid
// until the next put or delete, which may move slots.
func (m *strMap[V]) ref(key string) *V {
	if i := m.find(key); i >= 0 {
		return &m.slots[i].val
	}
	return nil
}

// put sets key's value.
func (m *strMap[V]) put(key string, val V) {
	if i := m.find(key); i >= 0 {
		m.slots[i].val = val
		return
	}
	m.insert(key, val)
}

// insert adds key, which the map does not hold, with its value: put without
// the search, for a caller that has just missed it.
func (m *strMap[V]) insert(key string, val V) {
	if 4*(m.n+1) > 3*len(m.slots) {
		m.grow()
	}
	m.place(strSlot[V]{hash: m.hash(key), key: key, val: val})
	m.n++
}

// place puts s in the first free slot from its home; there is one.
func (m *strMap[V]) place(s strSlot[V]) {
	mask := uint64(len(m.slots) - 1)
	i := s.hash & mask
	for m.slots[i].hash != 0 {
		i = (i + 1) & mask
	}
	m.slots[i] = s
}

func (m *strMap[V]) grow() {
	old := m.slots
	m.slots = make([]strSlot[V], max(8, 2*len(old)))
	for _, s := range old {
		if s.hash != 0 {
			m.place(s)
		}
	}
}

// delete removes key, if held, moving back the slots after it that would
// otherwise no longer be found from their home.
func (m *strMap[V]) delete(key string) {
	i := m.find(key)
	if i < 0 {
		return
	}
	mask := uint64(len(m.slots) - 1)
	hole := uint64(i)
	for j := (hole + 1) & mask; m.slots[j].hash != 0; j = (j + 1) & mask {
		// The slot at j may fill the hole if the hole lies on its probe
		// path: no farther from its home than j is.
		home := m.slots[j].hash & mask
		if (j-home)&mask >= (j-hole)&mask {
			m.slots[hole] = m.slots[j]
			hole = j
		}
	}
	m.slots[hole] = strSlot[V]{}
	m.n--
}

// len returns how many keys the map holds.
func (m *strMap[V]) len() int { return m.n }

// all yields every key and value, in the map's order.
func (m *strMap[V]) all() iter.Seq2[string, V] {
	return func(yield func(string, V) bool) {
		for i := range m.slots {
			if s := &m.slots[i]; s.hash != 0 && !yield(s.key, s.val) {
				return
			}
		}
	}
}
