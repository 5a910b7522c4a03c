package crdt

import "math"

// Timestamp is a hybrid logical clock reading: wall time in Unix nanoseconds
// plus a logical counter that orders events within one wall reading. It stays
// close to physical time while respecting causality across nodes.
type Timestamp struct {
	Wall    int64
	Logical uint32
}

// Compare orders timestamps: -1, 0 or +1.
func (t Timestamp) Compare(u Timestamp) int {
	switch {
	case t.Wall < u.Wall:
		return -1
	case t.Wall > u.Wall:
		return 1
	case t.Logical < u.Logical:
		return -1
	case t.Logical > u.Logical:
		return 1
	}
	return 0
}

// IsZero reports whether t is the zero timestamp.
func (t Timestamp) IsZero() bool { return t == Timestamp{} }

// HLC is a hybrid logical clock (Kulkarni et al., "Logical Physical Clocks",
// 2014). It is pure: the caller passes the physical time in.
type HLC struct {
	last Timestamp
}

// Now returns a timestamp for a local event at physical time wall. Successive
// calls return strictly increasing timestamps even if wall goes backwards.
func (c *HLC) Now(wall int64) Timestamp {
	if wall > c.last.Wall {
		c.last = Timestamp{Wall: wall}
	} else {
		c.last = c.last.next()
	}
	return c.last
}

// Observe merges a timestamp received from another node, so the next local
// timestamp orders after it.
func (c *HLC) Observe(wall int64, remote Timestamp) Timestamp {
	switch {
	case wall > c.last.Wall && wall > remote.Wall:
		c.last = Timestamp{Wall: wall}
	case remote.Wall > c.last.Wall:
		c.last = remote.next()
	case c.last.Wall > remote.Wall:
		c.last = c.last.next()
	default: // equal walls
		c.last = Timestamp{Wall: remote.Wall, Logical: max(c.last.Logical, remote.Logical)}.next()
	}
	return c.last
}

// next returns the smallest timestamp after t. A logical counter at its
// limit (a peer's timestamp can carry any value) moves to the next
// nanosecond instead of wrapping to a smaller timestamp.
func (t Timestamp) next() Timestamp {
	if t.Logical == math.MaxUint32 {
		return Timestamp{Wall: t.Wall + 1}
	}
	return Timestamp{Wall: t.Wall, Logical: t.Logical + 1}
}

// Last returns the latest timestamp issued or observed.
func (c *HLC) Last() Timestamp { return c.last }
