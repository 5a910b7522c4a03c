package node

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rollcall/rollcall/crdt"
)

// The presence feed: what the status page (/ui) shows as recent events.
//
// flushEvents, the one place where presence changes become events, also
// hands every change of a user's aggregate to the feed: local writes and
// remote ones alike, whether or not anyone subscribes to the user. The feed
// keeps the last Config.UIRecentEvents changes in a ring (the oldest is
// overwritten and counted) and copies each change to the streams reading it
// (GET /v1/ui/events), each through a bounded queue: a stream that lets its
// queue fill misses changes (counted, and told), and neither the flush nor
// anyone else ever waits for it.

// PresenceChange is one change of a user's presence as this node's
// projection saw it: the user came online, went offline, or changed status,
// status text or emoji, sessions or gateways. It is the presence every
// reader sees (crdt.Presence.Public): an invisible user shows offline.
type PresenceChange struct {
	User     string `json:"user"`
	Online   bool   `json:"online"`
	Status   string `json:"status"`   // the user's aggregate status: available, away, busy, dnd or offline
	Sessions int    `json:"sessions"` // active sessions after the change
	// Text and Emoji are the user's status text and emoji ("" for none).
	Text  string `json:"text,omitempty"`
	Emoji string `json:"emoji,omitempty"`
	// LastSeen is, for a user who went offline, when the user's last
	// session ended (RFC 3339, as a presence's last_seen), when this node
	// knew it at the change; "" otherwise.
	LastSeen string `json:"last_seen,omitempty"`
	// Gateways are the gateways of the user's active sessions, sorted; for a
	// user who went offline, the gateways of the sessions that ended.
	Gateways []string `json:"gateways"`
	// Local is true when one of Gateways is this node: the change came from
	// (or touched) a session this node owns.
	Local   bool      `json:"local"`
	Time    time.Time `json:"time"`    // when this node emitted the change
	Version uint64    `json:"version"` // the presence version subscribers' events carry
}

// FeedStats describes the presence feed (GET /v1/ui/summary).
type FeedStats struct {
	Size        int    `json:"size"`         // changes the ring keeps
	Recorded    uint64 `json:"recorded"`     // changes recorded since start
	Overwritten uint64 `json:"overwritten"`  // changes pushed out of the ring by newer ones
	Streams     int    `json:"streams"`      // open event streams
	StreamDrops uint64 `json:"stream_drops"` // changes not queued to a stream whose queue was full
}

// feedLast is what the feed last recorded for an online user. Guarded by
// Node.mu; absent means offline.
type feedLast struct {
	status      crdt.UserStatus
	sessions    int
	gateways    []string
	text, emoji string
}

// feedChangeLocked compares u's presence with what the feed last recorded
// and returns the change to record, if any. The caller fills Time and
// Version.
func (n *Node) feedChangeLocked(p crdt.Presence) (PresenceChange, bool) {
	prev, had := n.feedLast[p.User]
	if !p.Online {
		if !had {
			return PresenceChange{}, false
		}
		delete(n.feedLast, p.User)
		return n.presenceChange(p, prev.gateways), true
	}
	gateways := make([]string, 0, 1)
	for _, s := range p.Sessions {
		gateways = append(gateways, s.Gateway)
	}
	slices.Sort(gateways)
	gateways = slices.Compact(gateways)
	if had && prev.status == p.Status && prev.sessions == len(p.Sessions) && slices.Equal(prev.gateways, gateways) &&
		prev.text == p.Text && prev.emoji == p.Emoji {
		return PresenceChange{}, false
	}
	n.feedLast[p.User] = feedLast{status: p.Status, sessions: len(p.Sessions), gateways: gateways, text: p.Text, emoji: p.Emoji}
	return n.presenceChange(p, gateways), true
}

func (n *Node) presenceChange(p crdt.Presence, gateways []string) PresenceChange {
	ch := PresenceChange{User: p.User, Online: p.Online, Status: p.Status.String(), Sessions: len(p.Sessions),
		Text: p.Text, Emoji: p.Emoji, Gateways: gateways, Local: slices.Contains(gateways, n.cfg.Name)}
	if !p.Online && p.LastSeen != 0 {
		ch.LastSeen = n.formatTime(time.Unix(0, p.LastSeen))
	}
	return ch
}

// feed is the ring of recent changes and the streams reading them. Its
// methods are safe for concurrent use; publish never blocks.
type feed struct {
	// Static after newFeed.
	queue      int           // per-stream queue length
	maxStreams int           // streams open at once
	stopped    chan struct{} // closed by stop: streams end, new ones are refused

	mu          sync.Mutex
	ring        []PresenceChange // circular, len(ring) is the ring's size
	next        int              // where the next change goes
	held        int              // changes in the ring
	streams     map[*feedStream]struct{}
	isStopped   bool
	recorded    uint64
	overwritten uint64
	streamDrops uint64
}

// feedStream is one reader's queue.
type feedStream struct {
	ch      chan PresenceChange
	dropped atomic.Uint64 // changes not queued since the reader last looked
}

func newFeed(size, queue, maxStreams int) *feed {
	return &feed{
		queue:      queue,
		maxStreams: maxStreams,
		stopped:    make(chan struct{}),
		ring:       make([]PresenceChange, size),
		streams:    make(map[*feedStream]struct{}),
	}
}

// publish records changes, in order, and queues them to every stream.
func (f *feed) publish(changes []PresenceChange) {
	if len(changes) == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range changes {
		f.recorded++
		if len(f.ring) > 0 {
			if f.held == len(f.ring) {
				f.overwritten++
			} else {
				f.held++
			}
			f.ring[f.next] = c
			f.next = (f.next + 1) % len(f.ring)
		}
		for s := range f.streams {
			select {
			case s.ch <- c:
			default:
				s.dropped.Add(1)
				f.streamDrops++
			}
		}
	}
}

// recentLocked returns the ring's changes, oldest first.
func (f *feed) recentLocked() []PresenceChange {
	out := make([]PresenceChange, 0, f.held)
	start := f.next - f.held
	if start < 0 {
		start += len(f.ring)
	}
	for i := range f.held {
		out = append(out, f.ring[(start+i)%len(f.ring)])
	}
	return out
}

// recent returns the ring's changes, oldest first.
func (f *feed) recent() []PresenceChange {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.recentLocked()
}

// subscribe returns the ring's changes and a stream that gets every change
// after them, with nothing lost or repeated in between. It fails once the
// feed has stopped (errFeedStopped) or while maxStreams are open
// (errTooManyStreams).
func (f *feed) subscribe() (snapshot []PresenceChange, s *feedStream, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.isStopped:
		return nil, nil, errFeedStopped
	case len(f.streams) >= f.maxStreams:
		return nil, nil, errTooManyStreams
	}
	s = &feedStream{ch: make(chan PresenceChange, f.queue)}
	f.streams[s] = struct{}{}
	return f.recentLocked(), s, nil
}

// unsubscribe forgets a stream.
func (f *feed) unsubscribe(s *feedStream) {
	f.mu.Lock()
	delete(f.streams, s)
	f.mu.Unlock()
}

// stop ends every stream and refuses new ones. Later calls do nothing.
func (f *feed) stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.isStopped {
		f.isStopped = true
		close(f.stopped)
	}
}

func (f *feed) stats() FeedStats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return FeedStats{Size: len(f.ring), Recorded: f.recorded, Overwritten: f.overwritten,
		Streams: len(f.streams), StreamDrops: f.streamDrops}
}

// stopFeed ends the status-page streams and refuses new ones (drain and
// close).
func (n *Node) stopFeed() {
	if n.feed != nil {
		n.feed.stop()
	}
}
