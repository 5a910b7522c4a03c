package crdt

import (
	"sort"

	"github.com/google/btree"
)

// versionLog holds an origin's current records ordered by version. A
// replica of a large cluster holds thousands of origins with a record or two
// each, where a B-tree per origin costs more than the records; a gateway may
// own a hundred thousand. So a small log is a slice kept sorted (an in-order
// insert appends, a late one is placed by binary search, a deletion marks
// its item dead and the dead are compacted once they are half the slice),
// and a log that grows past smallLogMax moves to a B-tree, where a late
// insert — anti-entropy filling scattered gaps — costs O(log n), not a shift
// of the whole slice.
//
// fn passed to the Ascend methods must not modify the log.
type versionLog struct {
	items []logItem // sorted by version; dead items stay until compaction
	dead  int
	tree  *btree.BTreeG[logItem] // once the log outgrew the slice; items is then nil
}

// smallLogMax is the largest log kept as a slice.
const smallLogMax = 512

func lessLogItem(a, b logItem) bool { return a.version < b.version }

// grow moves the live items into a B-tree.
func (l *versionLog) grow() {
	t := btree.NewG(32, lessLogItem)
	for _, it := range l.items {
		if !it.dead {
			t.ReplaceOrInsert(it)
		}
	}
	l.tree, l.items, l.dead = t, nil, 0
}

// search returns the index of the first item with version >= v.
func (l *versionLog) search(v uint64) int {
	return sort.Search(len(l.items), func(i int) bool { return l.items[i].version >= v })
}

// ReplaceOrInsert adds it, replacing an item of the same version.
func (l *versionLog) ReplaceOrInsert(it logItem) {
	it.dead = false
	if l.tree != nil {
		l.tree.ReplaceOrInsert(it)
		return
	}
	if len(l.items) >= smallLogMax {
		l.grow()
		l.tree.ReplaceOrInsert(it)
		return
	}
	if n := len(l.items); n == 0 || l.items[n-1].version < it.version {
		l.items = append(l.items, it)
		return
	}
	i := l.search(it.version)
	if i < len(l.items) && l.items[i].version == it.version {
		if l.items[i].dead {
			l.dead--
		}
		l.items[i] = it
		return
	}
	l.items = append(l.items, logItem{})
	copy(l.items[i+1:], l.items[i:])
	l.items[i] = it
}

// Delete removes the item with it's version, if live.
func (l *versionLog) Delete(it logItem) {
	if l.tree != nil {
		l.tree.Delete(logItem{version: it.version})
		return
	}
	i := l.search(it.version)
	if i == len(l.items) || l.items[i].version != it.version || l.items[i].dead {
		return
	}
	l.items[i] = logItem{version: it.version, dead: true} // drop the pointers for the GC
	l.dead++
	if l.dead > 16 && 2*l.dead > len(l.items) {
		l.compact()
	}
}

func (l *versionLog) compact() {
	live := l.items[:0]
	for _, it := range l.items {
		if !it.dead {
			live = append(live, it)
		}
	}
	clear(l.items[len(live):])
	l.items, l.dead = live, 0
	if cap(l.items) > 64 && len(l.items) < cap(l.items)/4 {
		l.items = append([]logItem(nil), l.items...)
	}
}

// Get returns the live item with version v.
func (l *versionLog) Get(v uint64) (logItem, bool) {
	if l.tree != nil {
		return l.tree.Get(logItem{version: v})
	}
	i := l.search(v)
	if i < len(l.items) && l.items[i].version == v && !l.items[i].dead {
		return l.items[i], true
	}
	return logItem{}, false
}

// Max returns the live item with the highest version.
func (l *versionLog) Max() (logItem, bool) {
	if l.tree != nil {
		return l.tree.Max()
	}
	for i := len(l.items) - 1; i >= 0; i-- {
		if !l.items[i].dead {
			return l.items[i], true
		}
	}
	return logItem{}, false
}

// Len returns the number of live items.
func (l *versionLog) Len() int {
	if l.tree != nil {
		return l.tree.Len()
	}
	return len(l.items) - l.dead
}

// Ascend calls fn on every live item in version order until fn returns false.
func (l *versionLog) Ascend(fn func(logItem) bool) { l.AscendRange(0, ^uint64(0), fn) }

// AscendGreaterOrEqual calls fn on live items with version >= from.
func (l *versionLog) AscendGreaterOrEqual(from uint64, fn func(logItem) bool) {
	l.AscendRange(from, ^uint64(0), fn)
}

// AscendRange calls fn on live items with from <= version <= through.
func (l *versionLog) AscendRange(from, through uint64, fn func(logItem) bool) {
	if from > through {
		return
	}
	if l.tree != nil {
		l.tree.AscendGreaterOrEqual(logItem{version: from}, func(it logItem) bool {
			return it.version <= through && fn(it)
		})
		return
	}
	l.ascendFrom(l.search(from), through, fn)
}

// AscendLessThan calls fn on live items with version < below.
func (l *versionLog) AscendLessThan(below uint64, fn func(logItem) bool) {
	if below == 0 {
		return
	}
	l.AscendRange(0, below-1, fn)
}

func (l *versionLog) ascendFrom(i int, through uint64, fn func(logItem) bool) {
	for ; i < len(l.items); i++ {
		it := l.items[i]
		if it.version > through {
			return
		}
		if !it.dead && !fn(it) {
			return
		}
	}
}
