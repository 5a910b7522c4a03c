package dissem

// peerStore holds a node's peer records by the number of the peer's name
// in the node's OriginTable: an array index where a map keyed by name cost
// a string hash, a probe and (as the map grew) rehashing, for every
// message a node of a large cluster steps. Records are allocated in
// chunks and never move, so a record's address stays valid while the
// store grows.
type peerStore struct {
	idx  []int32  // by name number: 1 + the record's index; 0: none
	recs [][]peer // the records, peerChunk to a chunk
	n    int      // records held
}

// peerChunk is how many peer records are allocated at once: a node that
// hears of thousands of peers keeps their records together.
const peerChunk = 64

// rec returns record i, for i in [0, n).
func (s *peerStore) rec(i int) *peer { return &s.recs[i/peerChunk][i%peerChunk] }

// at returns the record of name number k, or nil.
func (s *peerStore) at(k int32) *peer {
	if int(k) >= len(s.idx) {
		return nil
	}
	i := s.idx[k]
	if i == 0 {
		return nil
	}
	return s.rec(int(i - 1))
}

// get returns the record of name number k, making an empty one if there
// is none (made reports that). names is how many names are numbered: the
// index grows to cover them all at once, rather than a few at a time as
// the node hears of them.
func (s *peerStore) get(k int32, names int) (p *peer, made bool) {
	if p := s.at(k); p != nil {
		return p, false
	}
	if int(k) >= len(s.idx) {
		idx := make([]int32, max(int(k)+1, names, 2*len(s.idx)))
		copy(idx, s.idx)
		s.idx = idx
	}
	i := s.n
	if i%peerChunk == 0 {
		s.recs = append(s.recs, make([]peer, peerChunk))
	}
	s.n++
	s.idx[k] = int32(i + 1)
	p = s.rec(i)
	p.name = k
	return p, true
}
