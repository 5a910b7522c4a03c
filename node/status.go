package node

import (
	"bytes"
	"container/heap"
	"encoding/json"
	"time"
	"unicode/utf8"

	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/protocol"
)

// Status text, until and session meta (docs/protocol.md, "account" and
// "meta"). An account's until lapses with no write: every presence read
// computes it at the time of the read (crdt.Aggregate). Subscribers learn
// of the lapse from the sweeper: every gateway that holds an account with
// an until queues the user (lapseQueue), and the first sweep at or after
// the until marks the user dirty, so the notifier emits the lapsed
// presence within a SweepInterval and an EventCoalesce of the time.

// checkMeta validates a session's meta, a JSON object, and returns it
// compacted ("" for an empty object).
func checkMeta(raw json.RawMessage) (string, *requestError) {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil || b.Len() == 0 || b.Bytes()[0] != '{' {
		return "", errorf(protocol.CodeBadRequest, "meta must be a JSON object")
	}
	if b.Len() > protocol.MaxMetaBytes {
		return "", errorf(protocol.CodeBadRequest, "meta of %d bytes (compacted) is over the limit of %d", b.Len(), protocol.MaxMetaBytes)
	}
	if b.Len() == 2 { // {}
		return "", nil
	}
	return b.String(), nil
}

// checkStatusText validates an account request's text and emoji (nil:
// absent).
func checkStatusText(text, emoji *string) *requestError {
	if text != nil {
		if n := utf8.RuneCountInString(*text); n > protocol.MaxStatusTextChars {
			return errorf(protocol.CodeBadRequest, "text of %d characters is over the limit of %d", n, protocol.MaxStatusTextChars)
		}
		if rerr := checkNoControl("text", *text); rerr != nil {
			return rerr
		}
	}
	if emoji != nil {
		if len(*emoji) > protocol.MaxStatusEmojiBytes {
			return errorf(protocol.CodeBadRequest, "emoji of %d bytes is over the limit of %d", len(*emoji), protocol.MaxStatusEmojiBytes)
		}
		if rerr := checkNoControl("emoji", *emoji); rerr != nil {
			return rerr
		}
	}
	var t, e string
	if text != nil {
		t = *text
	}
	if emoji != nil {
		e = *emoji
	}
	if err := crdt.CheckStatusText(t, e); err != nil { // what every peer would refuse
		return errorf(protocol.CodeBadRequest, "%v", err)
	}
	return nil
}

// checkNoControl refuses control characters and invalid UTF-8 in a
// status text or emoji.
func checkNoControl(what, s string) *requestError {
	for _, r := range s {
		if r < 0x20 || r == 0x7f || r == utf8.RuneError {
			return errorf(protocol.CodeBadRequest, "%s contains a control character or invalid UTF-8", what)
		}
	}
	return nil
}

// rawObject returns a held meta or info as raw JSON (nil for none).
func rawObject(s string) json.RawMessage {
	if s == "" {
		return nil
	}
	return json.RawMessage(s)
}

// formatUnixNano formats a Unix nanosecond time as the protocol's times
// are (Node.formatTime).
func formatUnixNano(ns int64) string {
	return time.Unix(0, ns).UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

// handleMeta sets the session's meta, within the session's meta
// allowance (Config.MetaRate).
func (n *Node) handleMeta(c *conn, req *protocol.Request) (any, *requestError) {
	if req.Meta == nil {
		return nil, errorf(protocol.CodeBadRequest, "missing meta (a JSON object; {} clears it)")
	}
	meta, rerr := checkMeta(req.Meta)
	if rerr != nil {
		return nil, rerr
	}
	var limited *requestError
	reply, uerr := n.updateSession(c, req, func(s *localSession) bool {
		lim := n.limits.Load()
		if ok, wait := s.metas.allow(n.mono(), lim.MetaRate, lim.MetaBurst); !ok {
			n.stats.rateLimited.Add(1)
			limited = errorf(protocol.CodeRateLimited, "at most %g meta requests per second (%d at once) per session; the next is allowed in %dms",
				lim.MetaRate, lim.MetaBurst, max(wait.Milliseconds(), 1))
			return false
		}
		if s.meta == meta {
			return false
		}
		s.meta = meta
		return true
	})
	if limited != nil {
		return nil, limited
	}
	return reply, uerr
}

// lapseQueue holds the users whose account has an until still to come, in
// the order of their untils (Unix nanoseconds on the node's clock), for
// the sweeper: one entry per user, moved when the user's until changes, so
// it holds at most one entry per such user however often they rewrite it.
// An entry whose until the account no longer has only marks the user dirty
// for nothing (the notifier emits no event for an unchanged presence).
// Guarded by Node.mu.
type lapseQueue struct {
	items  lapseHeap
	byUser map[string]*lapseItem
}

type lapseItem struct {
	at    int64
	user  string
	index int // in the heap
}

type lapseHeap []*lapseItem

func (h lapseHeap) Len() int           { return len(h) }
func (h lapseHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h lapseHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *lapseHeap) Push(x any) {
	it := x.(*lapseItem)
	it.index = len(*h)
	*h = append(*h, it)
}
func (h *lapseHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return it
}

// scheduleLapseLocked queues user for the sweeper at its account's until,
// if the account has one still to come.
func (n *Node) scheduleLapseLocked(user string) {
	a, ok := n.replica.Account(user)
	if !ok || a.Until == 0 || a.Until <= n.clock.Now().UnixNano() {
		return
	}
	q := &n.lapses
	if it := q.byUser[user]; it != nil {
		if it.at != a.Until {
			it.at = a.Until
			heap.Fix(&q.items, it.index)
		}
		return
	}
	if q.byUser == nil {
		q.byUser = make(map[string]*lapseItem)
	}
	it := &lapseItem{at: a.Until, user: user}
	q.byUser[user] = it
	heap.Push(&q.items, it)
}

// lapseDue marks dirty the users whose until has come at now (Unix
// nanoseconds), so their subscribers get the lapsed presence.
func (n *Node) lapseDue(now int64) {
	lk := lockOf(&n.mu)
	defer lk.unlock()
	q := &n.lapses
	for len(q.items) > 0 && q.items[0].at <= now {
		it := heap.Pop(&q.items).(*lapseItem)
		delete(q.byUser, it.user)
		n.markDirtyLocked(it.user)
	}
	n.unlockAndPublish(&lk, nil)
}
