package dissem

// Relay tree: the pure rules of a deterministic relay tree over the sorted
// member list, for dissemination beyond EagerThreshold. Nothing drives
// them yet.

// TreeFanout is the fanout of a relay tree of n members (owner included)
// of depth at most two: the smallest k with 1 + k + k*k >= n.
func TreeFanout(n int) int {
	k := 1
	for 1+k+k*k < n {
		k++
	}
	return k
}

// TreeChildren returns the positions, in a sorted member list of n
// members, of the children of the member at position self in the tree
// rooted at the owner at position owner: the list rotated to start at the
// owner, laid out as a k-ary heap (the children of rotated position r are
// r*k+1 .. r*k+k).
func TreeChildren(n, k, owner, self int) []int {
	if n <= 0 || k <= 0 || owner < 0 || owner >= n || self < 0 || self >= n {
		return nil
	}
	r := (self - owner + n) % n
	var out []int
	for c := r*k + 1; c <= r*k+k && c < n; c++ {
		out = append(out, (c+owner)%n)
	}
	return out
}
