package crdt

// PageCursor is where a paged diff (DiffPage) resumes: origins before
// Origin are done, and of Origin every record at or below After was sent.
// The zero cursor starts a transfer.
type PageCursor struct {
	Origin  Origin
	After   uint64
	Started bool
}

// originDone is After for an origin walked to its end.
const originDone = ^uint64(0)

// DiffPage is Diff in pages: one call returns the next page of the answer
// to peer, resuming at cur, with at most maxRecords records and about
// maxBytes of records (at least one record, so every page makes progress;
// 0 leaves a bound off), the cursor of the next page, and whether this page
// is the last. Origins are walked in sorted order and each origin's records
// in version order, so a page costs what it holds, whatever the state.
//
// Every page is a valid Sync on its own. An origin cut at the end of a page
// claims a watermark only up to the last version the page sent (at most the
// sender's watermark) and a GC floor no higher: a receiver that applies the
// pages it got and loses the rest holds what it claims, and its next digest
// asks for the remainder. The caller holds no state between pages but the
// cursor; writes made between pages are sent by later pages when they fall
// after the cursor, and otherwise reach the peer as any write does (deltas,
// the next anti-entropy round).
//
// A peer that holds nothing (a joiner) is paged like any other. When a
// peer that holds records lags below a GC floor (Diff's full snapshot), the
// answer is not paged: a full snapshot drops what it lacks, and a record of one page
// may have been refused because of one a later page drops
// (testdata/crdt/full_sync_order.txt), so the whole snapshot goes as one page.
func (r *Replica) DiffPage(peer Digest, cur PageCursor, maxRecords, maxBytes int) (page Sync, next PageCursor, done bool) {
	peerW, peerHeld := peerMaps(peer)
	if r.lagging(peerW, peerHeld) {
		return r.Diff(peer), PageCursor{}, true
	}
	records, bytes := 0, 0
	full := func() bool {
		return (maxRecords > 0 && records >= maxRecords) || (maxBytes > 0 && bytes >= maxBytes)
	}
	for _, st := range r.sortedOrigins() {
		var after uint64
		if cur.Started {
			switch c := compareOrigins(st.origin, cur.Origin); {
			case c < 0:
				continue
			case c == 0:
				if cur.After == originDone {
					continue
				}
				after = cur.After
			}
		}
		if full() {
			// The page is full and this origin is next: resume at it.
			return page, PageCursor{Origin: st.origin, After: after, Started: true}, false
		}
		var last uint64
		cut := false
		os, ok := r.diffOrigin(st, peerW, peerHeld, false, after, func(it logItem) bool {
			if full() {
				cut = true
				return false
			}
			records++
			bytes += r.itemSize(it)
			last = it.version
			return true
		})
		if !ok {
			continue
		}
		if cut {
			// Claim only what this page covers.
			os.Watermark = min(os.Watermark, last)
			os.GCFloor = min(os.GCFloor, os.Watermark)
			return append(page, os), PageCursor{Origin: st.origin, After: last, Started: true}, false
		}
		page = append(page, os)
	}
	return page, PageCursor{}, true
}

// itemSize estimates a record's encoded size, for page budgets.
func (r *Replica) itemSize(it logItem) int {
	switch it.kind {
	case itemAccount:
		a := r.acctSlots[it.ref]
		return 48 + len(a.User) + len(a.Writer) + len(a.Origin.Node) + len(a.AuthoritativeDevice)
	case itemLastSeen:
		ls := &r.lastSeen.slots[it.ref]
		return 32 + int(r.names.recs[ls.user].n) + len(r.originList[ls.origin].origin.Node)
	}
	rec := r.recs.at(recID(it.ref))
	node := r.originList[rec.origin].origin.Node
	n := 64 + int(r.names.recs[rec.user].n) + int(r.names.recs[rec.device].n) + int(r.names.recs[rec.id].n) + 2*len(node)
	for _, g := range r.sets.groups(rec.groups) {
		n += len(g) + 2
	}
	return n
}
