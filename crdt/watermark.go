package crdt

// Watermark returns this replica's watermark for origin o: every write of o
// up to it is held (or dominated). O(1); for drivers that compare one
// origin's announced watermark with their own on every announcement.
func (r *Replica) Watermark(o Origin) uint64 {
	if st := r.origin(o); st != nil {
		return st.watermark
	}
	return 0
}
