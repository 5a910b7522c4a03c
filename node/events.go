package node

import (
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/rollcall/rollcall/auth"
	"github.com/rollcall/rollcall/protocol"
)

// The change stream for backends that hold no session (docs/protocol.md,
// "Change stream"):
//
//	GET /v1/events?users=a,b     the presence of users a and b
//	GET /v1/events?group=g       the online members of group g
//	                             (users and group may be combined)
//
// answered as text/event-stream:
//
//	event: snapshot  id: <token>  data: Event   the current presence of each
//	                                           requested user and group member
//	event: presence  id: <token>  data: Event   a change, in version order
//	event: ready     id: <token>  data: {"version":V,"snapshot":bool}
//	                                           the snapshot (or the resumed
//	                                           changes) is complete
//	event: end                    data: {"reason":"draining"|"slow_consumer"|
//	                                     "token_expired"|"key_removed"}
//	: ping                        every Config.UIKeepAlive when idle
//
// A stream opened with a client token lives while the token does, as a
// session does: it ends with end {"reason":"token_expired"} at the token's
// exp (the verifier's leeway allows for clock skew when a token is
// accepted, and does not lengthen a stream's life), and with end {"reason":"key_removed"} when a key rotation
// (Node.ReloadTokenKeys) leaves no key that verifies it. Both are checked
// every streamCheckInterval, and the expiry also at its instant. A stream
// opened with the admin token, or on a Dev node, has neither end.
//
// Caps: MaxEventStreamsPerSubject streams per token subject and
// MaxEventStreamsPerIP per source address (sourceKey) are open at once; one
// more is answered 429 with a JSON error (code too_many_sessions for the
// subject, too_many_connections for the address), before anything is
// watched.
//
// Each data is the event line a subscribed session gets (Event: op, presence
// with its version, and group and member for a group's view). The stream is
// a subscriber of the same watches as a sub (subscribe.go): flushEvents
// delivers to it like to a connection, into a bounded queue
// (Config.OutboundQueue frames, OutboundQueueBytes bytes); a stream whose
// queue overflows ends with end {"reason":"slow_consumer"}, as a slow
// protocol connection is closed, and its reader resumes with Last-Event-ID.
//
// Resume: an id is "<version>-<incarnation>" (eventToken). Last-Event-ID
// (the header, or a last_event_id query parameter) resumes when the node
// still knows every user that changed since that version (changeLog): the
// current presence of each requested user that changed at or after it is
// sent as presence events, then ready {"snapshot":false}. Otherwise (an id
// of another node or incarnation, or older than the log holds) the stream
// starts with a snapshot, as a first connect does. The node keeps no
// history: a resumed stream gets the latest presence of a changed user,
// not every step, and may see a presence it already had.

// changeLogSize bounds the change log: entries (a user and a version) kept
// for resuming streams. A reader away for more changes than this gets a
// snapshot.
const changeLogSize = 4096

// snapshotBatch is how many initial events one write deadline covers.
const snapshotBatch = 256

// Stream caps and checks.
const (
	// DefaultMaxEventStreamsPerSubject caps the streams of one token
	// subject: a backend needs few (one stream carries up to
	// protocol.MaxSubscriptions subjects), a browser one per tab.
	DefaultMaxEventStreamsPerSubject = 16
	// DefaultMaxEventStreamsPerIP caps the streams from one source
	// address: several backends, or an office's browsers behind a NAT.
	DefaultMaxEventStreamsPerIP = 64
	// streamCheckInterval is how often a stream checks that its token is
	// still valid: its expiry on the node's clock, and after a key
	// rotation its signature.
	streamCheckInterval = time.Second
)

// changeLog is a ring of the users flushEvents found dirty, with the
// version of the pass. Guarded by Node.mu.
type changeLog struct {
	ring []changeEntry
	next int
	held int
	// lost is the highest version of an entry overwritten: a resume from
	// a version at or below it may miss changes.
	lost uint64
}

type changeEntry struct {
	version uint64
	user    string
}

func (l *changeLog) add(version uint64, users []string) {
	if len(l.ring) == 0 {
		return
	}
	for _, u := range users {
		if l.held == len(l.ring) {
			l.lost = max(l.lost, l.ring[l.next].version)
		} else {
			l.held++
		}
		l.ring[l.next] = changeEntry{version, u}
		l.next = (l.next + 1) % len(l.ring)
	}
}

// since returns the users that changed at or after version, or false when
// the log no longer covers it.
func (l *changeLog) since(version uint64) (map[string]struct{}, bool) {
	if version <= l.lost {
		return nil, false
	}
	out := make(map[string]struct{})
	for i := range l.held {
		e := l.ring[(l.next-1-i+len(l.ring))%len(l.ring)]
		if e.version < version {
			break // entries are in version order
		}
		out[e.user] = struct{}{}
	}
	return out, true
}

// eventStreams are the node's open change streams.
type eventStreams struct {
	stop     chan struct{} // closed by stopEventStreams: streams end, new ones are refused
	stopOnce sync.Once

	// Guarded by Node.mu.
	open       map[*eventStream]struct{}
	perSubject map[string]int     // open streams by token subject
	perIP      map[netip.Addr]int // open streams by source (sourceKey)

	// checkEvery is streamCheckInterval; tests in this package shorten it
	// before Start.
	checkEvery time.Duration

	opened         atomic.Uint64
	sent           atomic.Uint64 // events written to streams, snapshots included
	slow           atomic.Uint64 // streams ended because their queue overflowed
	refusedSubject atomic.Uint64 // streams refused at MaxEventStreamsPerSubject
	refusedIP      atomic.Uint64 // streams refused at MaxEventStreamsPerIP
	tokenExpired   atomic.Uint64 // streams ended because their token expired
	keyRemoved     atomic.Uint64 // streams ended because no key verifies their token any more
}

func (n *Node) initEventStreams() {
	n.streams.stop = make(chan struct{})
	n.streams.open = make(map[*eventStream]struct{})
	n.streams.perSubject = make(map[string]int)
	n.streams.perIP = make(map[netip.Addr]int)
	n.streams.checkEvery = streamCheckInterval
	n.changes.ring = make([]changeEntry, changeLogSize)
}

// stopEventStreams ends every change stream and refuses new ones (drain
// and close). Later calls do nothing.
func (n *Node) stopEventStreams() {
	n.streams.stopOnce.Do(func() { close(n.streams.stop) })
}

// eventToken is the SSE id of an event of version v on this node.
func (n *Node) eventToken(v uint64) string {
	return utoa(v) + "-" + utoa(n.origin.Incarnation)
}

// parseEventToken returns the version of a token of this node's
// incarnation.
func (n *Node) parseEventToken(s string) (uint64, bool) {
	v, inc, ok := strings.Cut(s, "-")
	if !ok || inc != utoa(n.origin.Incarnation) {
		return 0, false
	}
	version, err := strconv.ParseUint(v, 10, 64)
	return version, err == nil && version > 0
}

// streamFrame is one queued event.
type streamFrame struct {
	frame   []byte
	version uint64
}

// eventStream is one change stream's bounded queue: flushEvents delivers
// to it (subscriber), the handler's goroutine writes it out.
type eventStream struct {
	maxFrames, maxBytes int
	wake                chan struct{} // cap 1
	who                 viewer        // the reader (invisible.go)

	mu     sync.Mutex
	frames []streamFrame
	bytes  int
	slow   bool // the queue overflowed: the stream ends
}

func (s *eventStream) deliver(frame []byte, version uint64) bool {
	s.mu.Lock()
	if s.slow {
		s.mu.Unlock()
		return false
	}
	if len(s.frames) >= s.maxFrames || s.bytes+len(frame) > s.maxBytes {
		s.slow, s.frames, s.bytes = true, nil, 0
		s.mu.Unlock()
		s.signal()
		return false
	}
	s.frames = append(s.frames, streamFrame{frame, version})
	s.bytes += len(frame)
	s.mu.Unlock()
	s.signal()
	return true
}

func (s *eventStream) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// take returns the queued frames and whether the queue overflowed.
func (s *eventStream) take() ([]streamFrame, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.frames
	s.frames, s.bytes = nil, 0
	return f, s.slow
}

// eventsError answers a request refused before the stream starts.
func (n *Node) eventsError(w http.ResponseWriter, code int, ec protocol.ErrorCode, msg string) {
	n.writeJSON(w, code, map[string]string{"error": msg, "code": string(ec)})
}

// eventsSubjects parses and checks the users and group of a request.
func eventsSubjects(r *http.Request) (users []string, group string, rerr *requestError) {
	q := r.URL.Query()
	for _, v := range q["users"] {
		for u := range strings.SplitSeq(v, ",") {
			users = append(users, strings.TrimSpace(u))
		}
	}
	group = q.Get("group")
	if _, ok := q["group"]; ok && group == "" {
		return nil, "", errorf(protocol.CodeBadRequest, "group is empty")
	}
	req := &protocol.Request{Users: users, Group: group}
	if rerr := checkSubjects(req); rerr != nil {
		return nil, "", errorf(rerr.code, "%s (query: users=a,b and/or group=g)", rerr.msg)
	}
	users = uniqueStrings(users)
	k := len(users)
	if group != "" {
		k++
	}
	if k > protocol.MaxSubscriptions {
		return nil, "", errorf(protocol.CodeBadRequest, "at most %d subscriptions per stream", protocol.MaxSubscriptions)
	}
	return users, group, nil
}

// eventsAllowed decides whether r may read users and group: like a
// session's sub (authz.go), with a client token from the Authorization
// header; the admin token and a --dev node read everything. It answers the
// request itself when not.
// It returns the client token's identity and the token (nil and "" for
// the admin token and a Dev node).
func (n *Node) eventsAllowed(w http.ResponseWriter, r *http.Request, users []string, group string) (*auth.Identity, string, bool) {
	if n.cfg.Dev || n.isAdmin(r) {
		return nil, "", true
	}
	token := bearerToken(r)
	id, ok := n.clientIdentity(token)
	if !ok {
		n.unauthorized(w, r)
		return nil, "", false
	}
	rerr := checkReadAs(id.Grants, id.User, users)
	if rerr == nil && group != "" {
		rerr = checkReadGroupAs(id.Grants, group)
	}
	if rerr != nil {
		n.eventsError(w, http.StatusForbidden, rerr.code, rerr.msg)
		return nil, "", false
	}
	return id, token, true
}

// admitStreamLocked counts a new stream of subject ("" for none) from
// source, or returns the error to refuse it with (429) when either is at
// its cap. The caller holds n.mu.
func (n *Node) admitStreamLocked(subject string, source netip.Addr) *requestError {
	st := &n.streams
	if max := n.cfg.MaxEventStreamsPerSubject; max > 0 && subject != "" && st.perSubject[subject] >= max {
		st.refusedSubject.Add(1)
		return errorf(protocol.CodeTooManySessions, "%s holds %d event streams on this gateway, the most allowed; close one first",
			truncate(subject, 64), st.perSubject[subject])
	}
	if max := n.cfg.MaxEventStreamsPerIP; max > 0 && source.IsValid() && st.perIP[source] >= max {
		st.refusedIP.Add(1)
		return errorf(protocol.CodeTooManyConnections, "this address holds %d event streams on this gateway, the most allowed; close one first",
			st.perIP[source])
	}
	if subject != "" {
		st.perSubject[subject]++
	}
	if source.IsValid() {
		st.perIP[source]++
	}
	return nil
}

// releaseStreamLocked stops counting a stream admitted by
// admitStreamLocked. The caller holds n.mu.
func (n *Node) releaseStreamLocked(subject string, source netip.Addr) {
	st := &n.streams
	if subject != "" {
		if k := st.perSubject[subject] - 1; k > 0 {
			st.perSubject[subject] = k
		} else {
			delete(st.perSubject, subject)
		}
	}
	if source.IsValid() {
		if k := st.perIP[source] - 1; k > 0 {
			st.perIP[source] = k
		} else {
			delete(st.perIP, source)
		}
	}
}

// requestSource is the sourceKey of an HTTP request's client, or the zero
// Addr when its address is not an IP and port.
func (n *Node) requestSource(r *http.Request) netip.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	return n.sourceKey(net.TCPAddrFromAddrPort(ap))
}

// streamToken is what a stream opened with a client token checks while it
// runs (nil for a stream without one).
type streamToken struct {
	id    *auth.Identity
	token string
	keys  *auth.KeySet // the key set that last verified the token
}

// checkStreamToken returns why a stream must end now ("token_expired",
// "key_removed"), or "" while its token holds: it has not expired on the
// node's clock, and, when the keys have changed since they last verified
// it, the new ones verify it too.
func (n *Node) checkStreamToken(t *streamToken) string {
	if t == nil {
		return ""
	}
	now := n.clock.Now()
	if !now.Before(t.id.Expires) {
		n.streams.tokenExpired.Add(1)
		return string(protocol.CodeTokenExpired)
	}
	if ks := n.tokens.Keys(); ks != t.keys {
		if _, err := n.tokens.Verify(t.token, now); err != nil {
			n.streams.keyRemoved.Add(1)
			return "key_removed"
		}
		t.keys = ks
	}
	return ""
}

// handleEvents serves GET /v1/events (see the comment at the top of this
// file). It returns when the client goes away, when a write does not
// finish within Config.WriteTimeout, when the stream's queue overflows, or
// when the gateway drains or closes.
func (n *Node) handleEvents(w http.ResponseWriter, r *http.Request) {
	users, group, rerr := eventsSubjects(r)
	if rerr != nil {
		n.eventsError(w, http.StatusBadRequest, rerr.code, rerr.msg)
		return
	}
	id, token, ok := n.eventsAllowed(w, r, users, group)
	if !ok {
		return
	}
	var (
		tok     *streamToken
		subject string
	)
	if id != nil {
		// The keys read after Verify: a rotation in between is caught by
		// the first check.
		tok, subject = &streamToken{id: id, token: token, keys: n.tokens.Keys()}, id.User
	}
	source := n.requestSource(r)
	lastID := r.Header.Get("Last-Event-ID")
	if lastID == "" {
		lastID = r.URL.Query().Get("last_event_id")
	}
	s := &eventStream{maxFrames: n.cfg.OutboundQueue, maxBytes: n.cfg.OutboundQueueBytes, wake: make(chan struct{}, 1),
		who: n.httpViewer(r)}

	lk := lockOf(&n.mu)
	defer lk.unlock()
	select {
	case <-n.streams.stop:
		lk.unlock()
		w.Header().Set("Retry-After", "2")
		n.eventsError(w, http.StatusServiceUnavailable, protocol.CodeShuttingDown, "the gateway is shutting down; connect to another gateway with Last-Event-ID")
		return
	default:
	}
	if rerr := n.admitStreamLocked(subject, source); rerr != nil {
		lk.unlock()
		n.log.Info("event stream refused", zap.String("remote", r.RemoteAddr), zap.String("code", string(rerr.code)))
		w.Header().Set("Retry-After", "10")
		n.eventsError(w, http.StatusTooManyRequests, rerr.code, rerr.msg)
		return
	}
	var changed map[string]struct{}
	resumed := false
	if from, ok := n.parseEventToken(lastID); ok && from <= n.version {
		changed, resumed = n.changes.since(from)
	}
	version := n.nextVersionLocked()
	now := n.clock.Now().UnixNano()
	var initial [][]byte
	for _, u := range users {
		n.watchUserLocked(u).subs[s] = struct{}{}
		if _, ok := changed[u]; ok || !resumed {
			initial = append(initial, encodeEvent(s.who.view(n.replica.Presence(u, now)), version, "", nil))
		}
	}
	if group != "" {
		n.watchGroupLocked(group).subs[s] = struct{}{}
		online := n.visibleGroupMembersLocked(group, s.who)
		member := true
		if resumed {
			in := make(map[string]struct{}, len(online))
			for _, u := range online {
				in[u] = struct{}{}
			}
			// A changed user now outside the group may have left it.
			for _, u := range uniqueStrings(mapKeys(changed)) {
				_, is := in[u]
				initial = append(initial, encodeEvent(s.who.view(n.replica.Presence(u, now)), version, group, &is))
			}
		} else {
			for _, u := range online {
				initial = append(initial, encodeEvent(s.who.view(n.replica.Presence(u, now)), version, group, &member))
			}
		}
	}
	n.streams.open[s] = struct{}{}
	lk.unlock()
	n.streams.opened.Add(1)
	defer func() {
		lk := lockOf(&n.mu)
		defer lk.unlock()
		for _, u := range users {
			n.unwatchUserLocked(u, s)
		}
		if group != "" {
			n.unwatchGroupLocked(group, s)
		}
		delete(n.streams.open, s)
		n.releaseStreamLocked(subject, source)
	}()

	rc := http.NewResponseController(w)
	streamDeadlines(rc)
	defer rc.SetWriteDeadline(time.Time{}) //nolint:errcheck // the connection may be reused; not every writer supports deadlines
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	sw := &sseWriter{w: w, rc: rc, timeout: n.cfg.WriteTimeout}
	sw.begin()
	w.WriteHeader(http.StatusOK)
	name := "snapshot"
	if resumed {
		name = "presence"
	}
	for i, f := range initial {
		if i > 0 && i%snapshotBatch == 0 {
			sw.begin() // a large snapshot gets time in proportion, like writeFrames
		}
		n.writeStreamEvent(sw, name, version, f)
		if sw.err != nil {
			break
		}
	}
	// ready carries the id too: a reader of an empty snapshot can resume.
	n.writeStreamEvent(sw, "ready", version, encodeLine(map[string]any{"version": version, "snapshot": !resumed}))
	if err := sw.flush(); err != nil {
		n.log.Debug("event stream ended", zap.Error(err))
		return
	}
	keepAlive := time.NewTicker(n.cfg.UIKeepAlive)
	defer keepAlive.Stop()
	var check, expiry <-chan time.Time
	if tok != nil {
		t := time.NewTicker(n.streams.checkEvery)
		defer t.Stop()
		e := time.NewTimer(tok.id.Expires.Sub(n.clock.Now()))
		defer e.Stop()
		check, expiry = t.C, e.C
	}
	for {
		select {
		case <-r.Context().Done():
			return
		case <-n.streams.stop:
			sw.begin()
			sw.event("end", 0, map[string]string{"reason": "draining"})
			_ = sw.flush()
			return
		case <-check:
		case <-expiry:
		case <-keepAlive.C:
			sw.begin()
			sw.comment("ping")
		case <-s.wake:
			frames, slow := s.take()
			sw.begin()
			for _, f := range frames {
				n.writeStreamEvent(sw, "presence", f.version, f.frame)
			}
			if slow {
				n.streams.slow.Add(1)
				n.log.Info("slow event stream dropped", zap.String("remote", r.RemoteAddr))
				sw.event("end", 0, map[string]string{"reason": "slow_consumer"})
				_ = sw.flush()
				return
			}
		}
		if reason := n.checkStreamToken(tok); reason != "" {
			n.log.Info("event stream ended", zap.String("remote", r.RemoteAddr), zap.String("reason", reason))
			sw.begin()
			sw.event("end", 0, map[string]string{"reason": reason})
			_ = sw.flush()
			return
		}
		if err := sw.flush(); err != nil {
			n.log.Debug("event stream ended", zap.Error(err))
			return
		}
	}
}

// writeStreamEvent writes one encoded event frame (a line ending in a
// newline) as a server-sent event.
func (n *Node) writeStreamEvent(sw *sseWriter, name string, version uint64, frame []byte) {
	sw.write("event: " + name + "\nid: " + n.eventToken(version) + "\ndata: ")
	sw.write(string(frame[:len(frame)-1]))
	sw.write("\n\n")
	if sw.err == nil && name != "ready" {
		n.streams.sent.Add(1)
	}
}

func mapKeys(m map[string]struct{}) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
