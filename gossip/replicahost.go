package gossip

import (
	"sync"
	"time"

	"github.com/rollcall/rollcall/cluster"
	"github.com/rollcall/rollcall/crdt"
)

// ReplicaHost is a Host over a bare crdt.Replica, with no client
// connections: benchmarks, the simulator's calibration against a real
// cluster, and tests use it to run real memberlist clusters without gateways.
// It is safe for concurrent use.
type ReplicaHost struct {
	// static after construction
	now func() time.Time
	// OnChange, if set, is called (without the lock held) after a remote
	// delta or sync changed the replica, with the users it changed.
	OnChange func(users []string)
	// OnDeliver, if set, is called for each routed message delivered here.
	OnDeliver func(m cluster.Message)
	// OnKick, if set, is called for each kick of a user that has sessions
	// here.
	OnKick func(user, device string)

	mu sync.Mutex // guards r
	r  *crdt.Replica
}

var _ Host = (*ReplicaHost)(nil)

// NewReplicaHost returns a host whose replica writes as self. now may be
// nil for time.Now.
func NewReplicaHost(self crdt.Origin, now func() time.Time) (*ReplicaHost, error) {
	r, err := crdt.NewReplica(crdt.Config{Self: self})
	if err != nil {
		return nil, err
	}
	if now == nil {
		now = time.Now
	}
	return &ReplicaHost{r: r, now: now}, nil
}

// Do runs f with the replica under the host's lock.
func (h *ReplicaHost) Do(f func(r *crdt.Replica)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f(h.r)
}

func (h *ReplicaHost) nanos() int64 { return h.now().UnixNano() }

func (h *ReplicaHost) changed(users []string) {
	if h.OnChange != nil && len(users) > 0 {
		h.OnChange(users)
	}
}

// ApplyDeltas implements Host.
func (h *ReplicaHost) ApplyDeltas(ds []crdt.Delta) error {
	var users []string
	var firstErr error
	h.mu.Lock()
	now := h.nanos()
	for _, d := range ds {
		changed, dropped, err := h.r.Apply(d, now)
		if err != nil && firstErr == nil {
			firstErr = err
		}
		if changed {
			users = append(users, d.User())
		}
		users = append(users, dropped...)
	}
	h.mu.Unlock()
	h.changed(users)
	return firstErr
}

// Digest implements Host.
func (h *ReplicaHost) Digest() crdt.Digest {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.r.Digest()
}

// Diff answers peer's digest whole, in one Sync.
func (h *ReplicaHost) Diff(peer crdt.Digest) crdt.Sync {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.r.Diff(peer)
}

// DiffPage implements Host.
func (h *ReplicaHost) DiffPage(peer crdt.Digest, cur crdt.PageCursor, maxRecords, maxBytes int) (crdt.Sync, crdt.PageCursor, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.r.DiffPage(peer, cur, maxRecords, maxBytes)
}

// ApplySync implements Host.
func (h *ReplicaHost) ApplySync(s crdt.Sync) error {
	h.mu.Lock()
	users, err := h.r.ApplySync(s, h.nanos())
	h.mu.Unlock()
	h.changed(users)
	return err
}

// MarkNodeDown implements Host.
func (h *ReplicaHost) MarkNodeDown(n string) {
	h.mu.Lock()
	users := h.r.SetNodeDown(n, h.nanos())
	h.mu.Unlock()
	h.changed(users)
}

// MarkNodeUp implements Host.
func (h *ReplicaHost) MarkNodeUp(n string) {
	h.mu.Lock()
	users := h.r.SetNodeUp(n)
	h.mu.Unlock()
	h.changed(users)
}

// KickLocal implements Host: it counts the user's active sessions owned
// here (of device only, unless empty). It ends none: a ReplicaHost has no
// connections, and its owner writes its records (Put).
func (h *ReplicaHost) KickLocal(user, device string) int {
	h.mu.Lock()
	n := 0
	for _, s := range h.r.UserSessions(user) {
		if s.State == crdt.StateActive && s.Gateway == h.r.Self().Node && (device == "" || s.Device == device) {
			n++
		}
	}
	h.mu.Unlock()
	if n > 0 && h.OnKick != nil {
		h.OnKick(user, device)
	}
	return n
}

// DeliverLocal implements Host: it counts the recipient's active sessions
// owned here.
func (h *ReplicaHost) DeliverLocal(m cluster.Message) int {
	h.mu.Lock()
	n := 0
	for _, s := range h.r.UserSessions(m.To) {
		if s.State == crdt.StateActive && s.Gateway == h.r.Self().Node {
			n++
		}
	}
	h.mu.Unlock()
	if n > 0 && h.OnDeliver != nil {
		h.OnDeliver(m)
	}
	return n
}

// Watermark implements Host.
func (h *ReplicaHost) Watermark(o crdt.Origin) uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.r.Watermark(o)
}

// SessionCount implements Host.
func (h *ReplicaHost) SessionCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.r.Census()
	return c.Local[crdt.StateActive]
}

// Put writes a session as this host's origin and returns the delta to
// publish.
func (h *ReplicaHost) Put(s crdt.Session) (crdt.Delta, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.r.PutLocal(s, h.nanos())
}
