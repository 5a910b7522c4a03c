package crdt

import "fmt"

// PageCursor is where a paged diff (DiffPage) resumes: origins before
// Origin are done, and of Origin every record at or below After was sent.
// The zero cursor starts a transfer.
type PageCursor struct {
	Origin  Origin
	After   uint64
	Started bool
	// Pass is the pass of the answer the cursor is in: a paged snapshot
	// for a lagging peer takes two.
	Pass PagePass
}

// PagePass is which pass of a paged answer a page belongs to.
type PagePass uint8

const (
	// PassDiff pages carry what the peer lacks (Diff's answer).
	PassDiff PagePass = iota
	// PassDrop is the first pass of a snapshot for a peer lagging below
	// a GC floor: for each origin, the versions the sender holds, so the
	// peer drops what the snapshot lacks before anything merges.
	PassDrop
	// PassFull is its second pass: every record, merged whatever the
	// peer's watermark.
	PassFull
	// MaxPagePass is the highest pass.
	MaxPagePass = PassFull
)

func (p PagePass) String() string {
	switch p {
	case PassDiff:
		return "diff"
	case PassDrop:
		return "drop"
	case PassFull:
		return "full"
	}
	return fmt.Sprintf("pass(%d)", uint8(p))
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
// the next anti-entropy round). A sender that is not the origin may also
// come to hold, between pages, records below the cursor that it lacked
// when a page passed there (a gap of its own, filled since): a page that
// resumes an origin claims nothing above the peer's watermark unless that
// reaches the cursor, so the peer's next digest asks for what it lacks.
//
// A peer that holds nothing (a joiner) is paged like any other. A peer
// that holds records and lags below a GC floor is owed Diff's full
// snapshot, which drops what it lacks; whether it is is decided at the
// first page (a transfer under way keeps its pass). A snapshot that fits
// in one page goes as it is. A larger one goes in two passes
// (testdata/crdt/full_sync_paged.txt). The first (PassDrop) sends, per
// origin, the runs of versions the sender holds (DropRange), from which
// the peer drops what the snapshot lacks; no record merges and no
// watermark moves. The second (PassFull) sends every record, as Full
// entries that drop nothing, merged whatever the peer's watermark. Drops
// come first because a record of one origin may have been refused because
// of a record of another that the snapshot drops
// (testdata/crdt/full_sync_order.txt): merged before that drop, it would be
// refused again, and its watermark claimed without it. A snapshot cut
// anywhere leaves the peer lagging until the second pass has covered every
// origin, so the next anti-entropy round starts it again.
func (r *Replica) DiffPage(peer Digest, cur PageCursor, maxRecords, maxBytes int) (page Sync, next PageCursor, done bool) {
	peerW, peerHeld := peerMaps(peer)
	b := pageBudget{maxRecords: maxRecords, maxBytes: maxBytes}
	switch cur.Pass {
	case PassDrop:
		page, next := r.dropPage(cur, b)
		return page, next, false
	case PassFull:
		return r.diffPage(peerW, peerHeld, true, cur, b)
	}
	if !cur.Started && r.lagging(peerW, peerHeld) {
		whole, _, done := r.diffPage(peerW, peerHeld, true, PageCursor{}, b)
		if done {
			return whole, PageCursor{}, true
		}
		page, next := r.dropPage(PageCursor{Pass: PassDrop, Started: true}, b)
		return page, next, false
	}
	return r.diffPage(peerW, peerHeld, false, cur, b)
}

// pageBudget is what one page may hold; zero bounds are off.
type pageBudget struct {
	maxRecords, maxBytes int
	records, bytes       int
}

func (b *pageBudget) full() bool {
	return (b.maxRecords > 0 && b.records >= b.maxRecords) || (b.maxBytes > 0 && b.bytes >= b.maxBytes)
}

// Sizes of a drop page's parts, for page budgets: an entry's fixed fields
// beside its origin's name, and one kept run.
const (
	dropEntryBytes = 32
	dropRunBytes   = 18
)

// diffPage is a page of records from cur on: what the peer lacks, or with
// lagging (a full snapshot's second pass, cur.Pass PassFull; or, from the
// zero cursor, the whole snapshot if it fits) every record as a Full entry.
func (r *Replica) diffPage(peerW map[Origin]uint64, peerHeld map[Origin][]Span, lagging bool, cur PageCursor, b pageBudget) (page Sync, next PageCursor, done bool) {
	at := func(o Origin, after uint64) PageCursor {
		return PageCursor{Origin: o, After: after, Started: true, Pass: cur.Pass}
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
		if b.full() {
			// The page is full and this origin is next: resume at it.
			return page, at(st.origin, after), false
		}
		// Resuming an origin where the peer's watermark stops short of
		// the cursor: the pages before sent its records up to the cursor
		// as this replica held them then, and claimed them only up to
		// this replica's watermark of the time. What this replica has
		// come to hold below the cursor since (a gap of its own filled
		// between pages) this page does not send, so it claims nothing
		// above the peer's watermark; the peer's next digest asks for
		// the rest (testdata/crdt/paged_resume_gap.txt).
		blind := after > 0 && peerW[st.origin] < after
		var last uint64
		cut := false
		os, ok := r.diffOrigin(st, peerW, peerHeld, lagging, after, func(it logItem) bool {
			if b.full() {
				cut = true
				return false
			}
			b.records++
			b.bytes += r.itemSize(it)
			last = it.version
			return true
		})
		if !ok {
			continue
		}
		if cur.Pass == PassFull {
			os.Drop = &DropRange{} // the first pass dropped
		}
		if blind {
			os.Watermark = min(os.Watermark, peerW[st.origin])
			os.GCFloor = min(os.GCFloor, os.Watermark)
		}
		if cut {
			// Claim only what this page covers.
			os.Watermark = min(os.Watermark, last)
			os.GCFloor = min(os.GCFloor, os.Watermark)
			return append(page, os), at(st.origin, last), false
		}
		page = append(page, os)
	}
	return page, PageCursor{}, true
}

// dropPage is a page of a full snapshot's first pass from cur on: for
// each origin, a DropRange over its versions up to the watermark, with the
// runs of them this replica holds, and the next page's cursor: within the
// pass, or the start of the second.
func (r *Replica) dropPage(cur PageCursor, b pageBudget) (page Sync, next PageCursor) {
	at := func(o Origin, after uint64) PageCursor {
		return PageCursor{Origin: o, After: after, Started: true, Pass: PassDrop}
	}
	for _, st := range r.sortedOrigins() {
		var after uint64
		if cur.Origin.Node != "" {
			switch c := compareOrigins(st.origin, cur.Origin); {
			case c < 0:
				continue
			case c == 0:
				after = cur.After
			}
		}
		if st.purged || st.watermark <= after {
			// Nothing to speak for: a whole snapshot drops nothing of a
			// purged origin (Diff sends it with watermark 0).
			continue
		}
		if b.full() {
			return page, at(st.origin, after)
		}
		d := &DropRange{After: after, Through: st.watermark}
		b.bytes += dropEntryBytes + len(st.origin.Node)
		cut := false
		st.log.AscendRange(after+1, st.watermark, func(it logItem) bool {
			v := it.version
			if k := len(d.Keep); k > 0 && d.Keep[k-1].Through+1 == v {
				d.Keep[k-1].Through = v
				return true
			}
			if len(d.Keep) > 0 && b.full() {
				// Speak for the gap up to this run only: the next page
				// starts with it.
				d.Through, cut = v-1, true
				return false
			}
			d.Keep = append(d.Keep, Span{After: v - 1, Through: v})
			b.records++
			b.bytes += dropRunBytes
			return true
		})
		page = append(page, OriginSync{Origin: st.origin, Full: true, Drop: d})
		if cut {
			return page, at(st.origin, d.Through)
		}
	}
	return page, PageCursor{Started: true, Pass: PassFull}
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
