package dissem

import (
	"fmt"
	"slices"
	"strings"

	"github.com/rollcall/rollcall/crdt"
)

// Ready is what a Node asks its driver to do, in the order given within
// each list: the outputs of every input since the last Ready. The driver
// executes it, then calls Advance.
type Ready struct {
	// Apply changes the local replica (and what the node shows), in order.
	Apply []Apply
	// Broadcasts go on the piggyback queue (memberlist's
	// TransmitLimitedQueue), which gossips them a limited number of times.
	Broadcasts []Broadcast
	// Sends are messages for one peer each: best effort (a UDP packet of
	// its own) or, when Reliable, over a stream.
	Sends []Send
	// Pulls name peers to ask, over a stream, for what this replica lacks:
	// the driver sends NewDigest(TypePull, name, its replica's digest) and
	// calls PullDone when the send is over.
	Pulls []string
	// PagePulls ask a peer, over a stream, for the next page of its paged
	// answer: the driver sends NewPullPage(name, its replica's digest,
	// Cursor) to To.
	PagePulls []PagePull
	// Answers are digests to answer: the driver computes the page of its
	// replica's answer to Digest at Cursor (crdt Replica.DiffPage, zero
	// Cursor for the first), sends it to To over a stream as a
	// NewSyncPage (unless it is the first and only page and empty), and
	// calls AnswerDone when that is over.
	Answers []Answer
	// Rejoin names members memberlist holds dead, or left while they have
	// since restarted, to join again (the driver knows their addresses).
	Rejoin []string
	// Forget names members dead longer than ReconnectTimeout: the driver
	// stops listing them in Members.
	Forget []string
	// Notes say what happened, for logs and counters.
	Notes []Note
}

// Clone returns a copy of rd whose lists are its own, for a driver that
// executes a Ready while the node goes on (Node.Ready's lists are the
// node's buffers).
func (rd *Ready) Clone() Ready {
	return Ready{Sends: slices.Clone(rd.Sends), Broadcasts: slices.Clone(rd.Broadcasts), Apply: slices.Clone(rd.Apply),
		Pulls: slices.Clone(rd.Pulls), PagePulls: slices.Clone(rd.PagePulls), Answers: slices.Clone(rd.Answers), Rejoin: slices.Clone(rd.Rejoin),
		Forget: slices.Clone(rd.Forget), Notes: slices.Clone(rd.Notes)}
}

// truncate empties every list, keeping its buffer, but for a Sends
// buffer longer than maxKeptSends: a send to every member (a relay when
// the owner is not in the node's tree) makes one as long as the cluster,
// which a node, and each of the simulator's thousands, need not hold
// between such sends.
func (rd *Ready) truncate() {
	clear(rd.Apply)
	clear(rd.Broadcasts)
	clear(rd.Answers)
	clear(rd.Notes)
	sends := rd.Sends[:0]
	if cap(sends) > maxKeptSends {
		sends = nil
	} else {
		clear(rd.Sends)
	}
	*rd = Ready{Apply: rd.Apply[:0], Broadcasts: rd.Broadcasts[:0], Sends: sends, Pulls: rd.Pulls[:0], PagePulls: rd.PagePulls[:0],
		Answers: rd.Answers[:0], Rejoin: rd.Rejoin[:0], Forget: rd.Forget[:0], Notes: rd.Notes[:0]}
}

// maxKeptSends is the longest Sends buffer a node keeps for its next
// Ready.
const maxKeptSends = 256

// Empty reports whether there is nothing to do.
func (rd *Ready) Empty() bool {
	return len(rd.Sends) == 0 && len(rd.Broadcasts) == 0 && len(rd.Apply) == 0 && len(rd.Pulls) == 0 && len(rd.PagePulls) == 0 &&
		len(rd.Answers) == 0 && len(rd.Rejoin) == 0 && len(rd.Forget) == 0 && len(rd.Notes) == 0
}

// Send is one message for one peer.
type Send struct {
	To       string
	Msg      *Message
	Reliable bool
}

// Broadcast is a message for the piggyback queue. Name is empty for a
// delta batch (it invalidates nothing) or "alive/NODE" for an
// announcement, which replaces the older one of the same name.
type Broadcast struct {
	Msg  *Message
	Name string
}

// Answer is a peer's digest to answer with what it lacks: the page of the
// answer at Cursor (zero: the first).
type Answer struct {
	To     string
	Digest crdt.Digest
	Cursor crdt.PageCursor
}

// PagePull asks To for the page of its answer at Cursor.
type PagePull struct {
	To     string
	Cursor crdt.PageCursor
}

// ApplyKind says what an Apply does.
type ApplyKind uint8

const (
	// ApplyDeltas merges Deltas, received from peers.
	ApplyDeltas ApplyKind = iota + 1
	// ApplySync merges Sync, an answer to this node's digest.
	ApplySync
	// MarkDown shows Node's sessions expired: its lease passed or
	// memberlist declared it failed.
	MarkDown
	// MarkUp shows Node's sessions again: it was heard from, and this
	// replica holds its writes.
	MarkUp
	// Retire drops the sessions of Origin.Node's incarnations older than
	// Origin's (the driver applies crdt.Sync{{Origin: Origin}}).
	Retire
)

func (k ApplyKind) String() string {
	return [...]string{"?", "apply-deltas", "apply-sync", "mark-down", "mark-up", "retire"}[k]
}

// Apply is one change to the replica.
type Apply struct {
	Kind   ApplyKind
	Deltas []crdt.Delta // ApplyDeltas
	Msg    *Message     // ApplyDeltas, ApplySync: the message they came in
	Sync   crdt.Sync    // ApplySync
	// Partial (ApplySync): a page of an answer that more pages follow; the
	// answer is whole only at its last page.
	Partial bool
	Node    string      // MarkDown, MarkUp
	Origin  crdt.Origin // Retire
}

// NoteKind says what a Note reports.
type NoteKind uint8

const (
	// NoteLeaseExpired: Node's lease passed; it is shown down.
	NoteLeaseExpired NoteKind = iota + 1
	// NoteMemberFailed: memberlist declared Node dead; it is shown down.
	NoteMemberFailed
	// NoteMemberLeft: Node left gracefully; it is shown down.
	NoteMemberLeft
	// NoteVerdictOverruled: memberlist declared Node dead, but it was
	// heard from since; its sessions stay shown.
	NoteVerdictOverruled
	// NoteReviving: Node was heard again while shown down; it stays down
	// until this replica holds its writes up to Version (a pull is on).
	NoteReviving
	// NoteRevivedEarly: Node is shown up before its missed writes arrived
	// (the pull did not complete within half a lease).
	NoteRevivedEarly
	// NoteGapPull: Node's announced watermark stayed ahead of ours.
	NoteGapPull
	// NoteAnswerDropped: a digest from Node went unanswered, as answers
	// were already at their bound (the asker retries).
	NoteAnswerDropped
	// NoteBadDeltas: a delta batch failed validation (Err) and was
	// dropped: not applied, not relayed, and no proof of life.
	NoteBadDeltas
	// NoteTransferStarted: Node began a paged answer to this node's digest.
	NoteTransferStarted
	// NoteTransferDone: Node's paged answer is complete (Pages, Records).
	NoteTransferDone
	// NoteTransferStalled: no page of Node's answer came for a while; the
	// page was asked for again (Pages, Records so far).
	NoteTransferStalled
	// NoteTransferAbandoned: Node's answer stalled too often; anti-entropy
	// fetches the rest (Pages, Records so far).
	NoteTransferAbandoned
)

// Note is one thing worth logging or counting.
type Note struct {
	Kind    NoteKind
	Node    string
	Version uint64
	Err     error
	// Pages and Records: a transfer's progress (NoteTransfer*).
	Pages, Records int
}

func (n Note) String() string {
	names := [...]string{"?", "lease-expired", "member-failed", "member-left", "verdict-overruled", "reviving",
		"revived-early", "gap-pull", "answer-dropped", "bad-deltas",
		"transfer-started", "transfer-done", "transfer-stalled", "transfer-abandoned"}
	s := names[n.Kind] + " " + n.Node
	if n.Version > 0 {
		s += fmt.Sprintf(" @%d", n.Version)
	}
	if n.Pages > 0 {
		s += fmt.Sprintf(" pages=%d records=%d", n.Pages, n.Records)
	}
	if n.Err != nil {
		s += ": " + n.Err.Error()
	}
	return s
}

// String renders a Ready for tests and debugging, one line per output.
func (rd *Ready) String() string {
	var b strings.Builder
	for _, s := range rd.Sends {
		kind := "send"
		if s.Reliable {
			kind = "stream"
		}
		fmt.Fprintf(&b, "%s %s %s\n", kind, s.To, Describe(s.Msg))
	}
	for _, bc := range rd.Broadcasts {
		name := bc.Name
		if name == "" {
			name = "-"
		}
		fmt.Fprintf(&b, "broadcast %s %s\n", name, Describe(bc.Msg))
	}
	for _, a := range rd.Apply {
		switch a.Kind {
		case ApplyDeltas:
			fmt.Fprintf(&b, "apply deltas %s\n", describeDeltas(a.Deltas))
		case ApplySync:
			if a.Partial {
				fmt.Fprintf(&b, "apply sync page %d origins %d records\n", len(a.Sync), a.Sync.Len())
				break
			}
			fmt.Fprintf(&b, "apply sync %d origins %d records\n", len(a.Sync), a.Sync.Len())
		case MarkDown, MarkUp:
			fmt.Fprintf(&b, "%s %s\n", a.Kind, a.Node)
		case Retire:
			fmt.Fprintf(&b, "retire %s\n", a.Origin)
		}
	}
	for _, p := range rd.Pulls {
		fmt.Fprintf(&b, "pull %s\n", p)
	}
	for _, p := range rd.PagePulls {
		fmt.Fprintf(&b, "pull-page %s at %s\n", p.To, describeCursor(p.Cursor))
	}
	for _, a := range rd.Answers {
		if a.Cursor.Started {
			fmt.Fprintf(&b, "answer %s (%d origins) at %s\n", a.To, len(a.Digest), describeCursor(a.Cursor))
			continue
		}
		fmt.Fprintf(&b, "answer %s (%d origins)\n", a.To, len(a.Digest))
	}
	for _, r := range rd.Rejoin {
		fmt.Fprintf(&b, "rejoin %s\n", r)
	}
	for _, f := range rd.Forget {
		fmt.Fprintf(&b, "forget %s\n", f)
	}
	for _, n := range rd.Notes {
		fmt.Fprintf(&b, "note %s\n", n)
	}
	return b.String()
}

// Describe renders a message briefly: its type, size and gist.
func Describe(m *Message) string {
	switch m.Type {
	case TypeDeltas:
		return fmt.Sprintf("deltas %dB %s", m.Size(), describeDeltas(m.Deltas))
	case TypeAlive, TypeLeaving, TypeListed:
		return fmt.Sprintf("%s %dB %s wm=%d sessions=%d", m.Type, m.Size(), m.Alive.Origin.Node, m.Alive.Watermark, m.Alive.Sessions)
	case TypePull, TypeState:
		return fmt.Sprintf("%s %dB from %s (%d origins)", m.Type, m.Size(), m.Digest.From, len(m.Digest.Digest))
	case TypeSyncPage:
		p := m.Page
		return fmt.Sprintf("sync-page %dB from %s at %s next %s last=%v %d origins %d records", m.Size(), p.From,
			describeCursor(p.At), describeCursor(p.Next), p.Last, len(m.Sync), m.Sync.Len())
	case TypePullPage:
		return fmt.Sprintf("pull-page %dB from %s at %s (%d origins)", m.Size(), m.Digest.From,
			describeCursor(m.Digest.Cursor), len(m.Digest.Digest))
	case TypeSync:
		return fmt.Sprintf("%s %dB %d origins %d records", m.Type, m.Size(), len(m.Sync), m.Sync.Len())
	}
	return fmt.Sprintf("%s %dB", m.Type, m.Size())
}

func describeCursor(c crdt.PageCursor) string {
	if !c.Started {
		return "start"
	}
	return fmt.Sprintf("%s>%d", c.Origin, c.After)
}

func describeDeltas(ds []crdt.Delta) string {
	parts := make([]string, len(ds))
	for i := range ds {
		parts[i] = fmt.Sprintf("%s:%s@%d", ds[i].Origin().Node, ds[i].User(), ds[i].Version())
	}
	return "[" + strings.Join(parts, " ") + "]"
}
