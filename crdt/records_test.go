package crdt

import "testing"

// The slab's first page grows by copying; records written before a growth
// must read back unchanged after it, across the first page's doublings and
// into later pages, and freed slots are reused.
func TestRecSlabKeepsRecordsAcrossGrowth(t *testing.T) {
	var sl recSlab
	const n = 3*recPageLen + 5
	ids := make([]recID, n)
	for i := range ids {
		ids[i] = sl.alloc()
		sl.at(ids[i]).epoch = uint64(i) + 1
	}
	for i, id := range ids {
		rec := sl.get(id)
		if rec == nil || rec.epoch != uint64(i)+1 {
			t.Fatalf("record %d (slot %d) = %+v after growth, want epoch %d", i, id, rec, i+1)
		}
	}
	sl.release(ids[7])
	if got := sl.alloc(); got != ids[7] {
		t.Fatalf("alloc after release = slot %d, want the freed slot %d", got, ids[7])
	}
	if rec := sl.get(ids[7]); rec == nil || rec.epoch != 0 {
		t.Fatalf("reused slot = %+v, want a zeroed live record", rec)
	}
}
