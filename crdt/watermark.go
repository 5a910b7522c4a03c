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

// WatermarkVia is Watermark that looks o up through ref first, as ApplyVia
// does, and leaves in ref where o's state is, if the replica has it: a
// caller asking again and again for one origin's watermark (a gateway's
// own, which each of its announcements carries) spares the node-table
// lookup.
func (r *Replica) WatermarkVia(ref *OriginRef, o Origin) uint64 {
	if ref.r == r && ref.st.origin == o {
		return ref.st.watermark
	}
	st := r.origin(o)
	if st == nil {
		return 0
	}
	ref.r, ref.st = r, st
	return st.watermark
}
