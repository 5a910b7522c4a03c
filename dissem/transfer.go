package dissem

import (
	"maps"
	"slices"

	"github.com/rollcall/rollcall/crdt"
)

// Paged state transfer, the asking side. A member answers a digest one
// page at a time (TypeSyncPage); this node applies each page, then asks the
// sender for the next (TypePullPage, with its digest as it is now and the
// page's next cursor). One page is in flight per sender, so pages arrive in
// order, neither side holds more than a page, and the sender keeps no state
// between pages. One transfer comes in at a time: while it does, a fresh
// answer from another member is applied but not followed up, and gaps in
// announced watermarks are not pulled (the transfer brings them). A page
// that does not come within TransferStall is asked for again, up to
// TransferRetries times; then the transfer is left to anti-entropy, whose
// next answer starts from what this node then holds.

const (
	// TransferStall is how long a paged answer may go without a page
	// before the page is asked for again, in AliveIntervals.
	TransferStall = 3
	// TransferRetries bounds how often a stalled page is asked for again
	// before the transfer is abandoned.
	TransferRetries = 5
)

// transfer is a paged answer coming in from one sender.
type transfer struct {
	next           crdt.PageCursor // the page asked for
	at             int64           // when it was asked for
	retries        int
	pages, records int
}

// stepPage follows up on a page of a paged answer from p.From.
func (n *Node) stepPage(p SyncPage, records int, now int64) {
	from := p.From
	if from == n.name {
		return
	}
	t := n.transfers[from]
	switch {
	case !p.At.Started && len(n.transfers) > 0:
		// A fresh answer (a push/pull's) while a transfer is under way: its
		// records are applied, and the transfer goes on; a second chain
		// would send the same pages again.
		return
	case !p.At.Started:
		if p.Last {
			return // a whole answer in one page
		}
		t = &transfer{}
		if n.transfers == nil {
			n.transfers = make(map[string]*transfer)
		}
		n.transfers[from] = t
		n.out().Notes = append(n.rd.Notes, Note{Kind: NoteTransferStarted, Node: from})
	case t == nil || t.next != p.At:
		// A page asked for twice (a stall retried) and answered twice, or
		// of a transfer since abandoned: applied, not followed up.
		return
	}
	t.pages++
	t.records += records
	t.retries = 0
	if p.Last {
		delete(n.transfers, from)
		n.out().Notes = append(n.rd.Notes, Note{Kind: NoteTransferDone, Node: from, Pages: t.pages, Records: t.records})
		return
	}
	t.next, t.at = p.Next, now
	n.out().PagePulls = append(n.rd.PagePulls, PagePull{To: from, Cursor: p.Next})
}

// checkTransfers asks again for pages overdue, in sender order, and
// abandons transfers that stalled too often.
func (n *Node) checkTransfers(now int64) {
	if len(n.transfers) == 0 {
		return
	}
	stall := int64(TransferStall * n.cfg.AliveInterval)
	for _, from := range slices.Sorted(maps.Keys(n.transfers)) {
		t := n.transfers[from]
		if now-t.at < stall {
			continue
		}
		note := Note{Node: from, Pages: t.pages, Records: t.records}
		if t.retries >= TransferRetries {
			delete(n.transfers, from)
			note.Kind = NoteTransferAbandoned
			n.out().Notes = append(n.rd.Notes, note)
			continue
		}
		t.retries++
		t.at = now
		note.Kind = NoteTransferStalled
		n.out().Notes = append(n.rd.Notes, note)
		n.out().PagePulls = append(n.rd.PagePulls, PagePull{To: from, Cursor: t.next})
	}
}

// Transfers returns the number of paged answers coming in.
func (n *Node) Transfers() int { return len(n.transfers) }
