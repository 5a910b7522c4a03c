package sim

import (
	"math/bits"
	"slices"
)

// slotMap maps node slots (0 to slots-1) to values: a Go map while it
// holds few of them, an array indexed by slot once it holds more than
// slots/denseFraction. A node's memberlist view and its queues' name
// indexes are such maps: empty in a healthy cluster (so ten thousand nodes
// hold no per-pair state), but under loss every node suspects, confirms
// and refutes about most others, and a lookup per message in a map of a
// thousand entries cost a fifth of the run where an array index costs one
// cache line. The array costs slots values, at most denseFraction times
// what the map held when it switched.
//
// While sparse, one value is held inline (one and v1) before any goes to
// the map: a queue's name index mostly holds one name, its node's own
// announcement, set again each time the announcement moves up a transmit
// tier, and a map assignment cost more than the rest of the move.
type slotMap[V any] struct {
	small   map[int32]V
	dense   []V      // by slot, once dense
	present []uint64 // dense: bit k set when slot k holds a value
	n       int
	slots   int32
	one     int32 // sparse: 1 + the slot held inline; 0: none
	v1      V
}

// denseFraction sets when a slotMap turns into an array: once it holds
// more than slots/denseFraction values.
const denseFraction = 8

func newSlotMap[V any](slots int) slotMap[V] { return slotMap[V]{slots: int32(slots)} }

// len returns the number of values held.
func (m *slotMap[V]) len() int { return m.n }

// get returns the value of slot k, if there is one.
func (m *slotMap[V]) get(k int32) (V, bool) {
	if m.dense != nil {
		if m.present[k>>6]&(1<<(uint(k)&63)) != 0 {
			return m.dense[k], true
		}
		var zero V
		return zero, false
	}
	if m.n == 0 {
		var zero V
		return zero, false
	}
	if k+1 == m.one {
		return m.v1, true
	}
	v, ok := m.small[k]
	return v, ok
}

// set stores v for slot k.
func (m *slotMap[V]) set(k int32, v V) {
	if m.dense != nil {
		w, b := k>>6, uint64(1)<<(uint(k)&63)
		if m.present[w]&b == 0 {
			m.present[w] |= b
			m.n++
		}
		m.dense[k] = v
		return
	}
	switch {
	case k+1 == m.one:
		m.v1 = v
		return
	case m.one == 0 && len(m.small) == 0: // k is not in the map
		m.one, m.v1 = k+1, v
	default:
		if m.small == nil {
			m.small = make(map[int32]V)
		}
		m.small[k] = v
	}
	m.n = len(m.small)
	if m.one != 0 {
		m.n++
	}
	if m.n > int(m.slots)/denseFraction {
		m.dense = make([]V, m.slots)
		m.present = make([]uint64, (m.slots+63)/64)
		for k, v := range m.small {
			m.dense[k] = v
			m.present[k>>6] |= 1 << (uint(k) & 63)
		}
		if k := m.one - 1; k >= 0 {
			m.dense[k] = m.v1
			m.present[k>>6] |= 1 << (uint(k) & 63)
		}
		m.small, m.one, m.v1 = nil, 0, *new(V)
	}
}

// del removes slot k's value, if any.
func (m *slotMap[V]) del(k int32) {
	if m.dense != nil {
		w, b := k>>6, uint64(1)<<(uint(k)&63)
		if m.present[w]&b != 0 {
			m.present[w] &^= b
			var zero V
			m.dense[k] = zero
			m.n--
		}
		return
	}
	if m.n == 0 {
		return
	}
	if k+1 == m.one {
		m.one, m.v1 = 0, *new(V)
	} else {
		delete(m.small, k)
	}
	m.n = len(m.small)
	if m.one != 0 {
		m.n++
	}
}

// sortedSlots returns the slots holding a value, ascending.
func (m *slotMap[V]) sortedSlots() []int32 {
	if m.dense == nil {
		out := sortedKeys(m.small)
		if k := m.one - 1; k >= 0 {
			i, _ := slices.BinarySearch(out, k)
			out = slices.Insert(out, i, k)
		}
		return out
	}
	out := make([]int32, 0, m.n)
	for w, word := range m.present {
		for word != 0 {
			b := bits.TrailingZeros64(word)
			out = append(out, int32(w*64+b))
			word &= word - 1
		}
	}
	return out
}
