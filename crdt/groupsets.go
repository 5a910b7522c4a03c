package crdt

import (
	"encoding/binary"
	"strings"
)

// groupSets interns the group sets of a replica's session records: most
// sessions share one of a few sets (a tenant's channels), so a record names
// its set by a 32-bit ID instead of holding a slice of names. A set holds a
// reference to each of its names in the replica's nameTable, and is
// refcounted by the records that use it: the set goes with its last
// record, and its names with their last holder.
type groupSets struct {
	byKey map[string]setID // the packed name IDs of a set -> its ID
	sets  []groupSet       // by ID; sets[0] is the empty set, never held
	free  []setID
}

// setID names a group set; 0 is the empty set.
type setID uint32

type groupSet struct {
	ids []nameID // the names, in the order of names
	// names are the group names, sorted: the Groups of every Session the
	// replica builds from a record of this set (shared: records and the
	// sessions built from them are read-only).
	names []string
	key   string
	refs  uint32 // 0: free
}

func newGroupSets() groupSets {
	return groupSets{byKey: make(map[string]setID), sets: make([]groupSet, 1)}
}

// appendSetKey appends the packed name IDs of a set: its map key.
func appendSetKey(b []byte, ids []nameID) []byte {
	for _, id := range ids {
		b = binary.LittleEndian.AppendUint32(b, uint32(id))
	}
	return b
}

// intern returns the ID of the set of groups (sorted and unique, as
// Validate checks), adding it if new, and takes a reference to it.
func (gs *groupSets) intern(names *nameTable, groups []string) setID {
	if len(groups) == 0 {
		return 0
	}
	// Most records bring a set already held: find it without allocating.
	if len(groups) == 1 {
		if n := names.lookup(groups[0]); n != 0 {
			if id := names.recs[n].single; id != 0 {
				gs.sets[id].refs++
				return id
			}
		}
	}
	key := make([]byte, 0, 64)
	known := true
	for _, g := range groups {
		id := names.lookup(g)
		if id == 0 {
			known = false
			break
		}
		key = binary.LittleEndian.AppendUint32(key, uint32(id))
	}
	if known {
		if id, ok := gs.byKey[string(key)]; ok {
			gs.sets[id].refs++
			return id
		}
	}
	set := groupSet{ids: make([]nameID, len(groups)), names: make([]string, len(groups)), refs: 1}
	for i, g := range groups {
		set.ids[i] = names.intern(g)
		set.names[i] = strings.Clone(g)
	}
	set.key = string(appendSetKey(nil, set.ids))
	var id setID
	if n := len(gs.free); n > 0 {
		id = gs.free[n-1]
		gs.free = gs.free[:n-1]
		gs.sets[id] = set
	} else {
		gs.sets = append(gs.sets, set)
		id = setID(len(gs.sets) - 1)
	}
	gs.byKey[set.key] = id
	if len(set.ids) == 1 {
		names.recs[set.ids[0]].single = id
	}
	return id
}

// retain takes one more reference to a held set.
func (gs *groupSets) retain(id setID) {
	if id != 0 {
		gs.sets[id].refs++
	}
}

// release drops a reference to a set, removing it (and its references to
// its names) with its last.
func (gs *groupSets) release(names *nameTable, id setID) {
	if id == 0 {
		return
	}
	set := &gs.sets[id]
	if set.refs--; set.refs > 0 {
		return
	}
	if len(set.ids) == 1 {
		names.recs[set.ids[0]].single = 0
	}
	for _, n := range set.ids {
		names.release(n)
	}
	delete(gs.byKey, set.key)
	*set = groupSet{}
	gs.free = append(gs.free, id)
}

// names returns the group names of a set (nil for the empty set); shared,
// read-only.
func (gs *groupSets) groups(id setID) []string { return gs.sets[id].names }

// ids returns the name IDs of a set's groups.
func (gs *groupSets) ids(id setID) []nameID { return gs.sets[id].ids }

// held returns how many sets the table holds.
func (gs *groupSets) held() int { return len(gs.sets) - 1 - len(gs.free) }
