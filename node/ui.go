package node

import (
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/http"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/rollcall/rollcall/cluster"
)

// The status page, on the HTTP endpoint:
//
//	GET /ui/              the page: static HTML, CSS and JavaScript embedded
//	                      in the binary (ui/), no external fetches
//	GET /v1/ui/summary    UISummary: members, sessions per gateway, counts
//	GET /v1/ui/events     text/event-stream of presence changes (feed.go):
//
//	    event: snapshot   data: {"node":…,"events":[PresenceChange…],"feed":FeedStats,"keep_alive_ms":…}
//	                      the recent changes, oldest first; always first
//	    event: presence   id: <version>  data: PresenceChange
//	                      each change after the snapshot, in version order
//	    event: dropped    data: {"dropped":N}
//	                      N changes were not queued to this stream (its
//	                      reader was slow); the page should reload the summary
//	    event: end        data: {"reason":"draining"}
//	                      the gateway is draining: the stream ends
//	    : keep-alive      a comment every Config.UIKeepAlive when idle
//
// The data endpoints are operator views, read routes like /v1/sessions
// (httpauth.go: the admin token or a backend client token; open on a Dev
// node), optionally wrapped further by Config.UIAuth. The page sends the admin token, when it has one, as
// "Authorization: Bearer <token>" on every data request, and reads the
// stream with fetch (EventSource cannot send headers).

//go:embed ui
var uiFiles embed.FS

// Defaults of the status page's Config fields.
const (
	DefaultUIRecentEvents = 200
	DefaultUIStreamQueue  = 256
	DefaultUIMaxStreams   = 32
	DefaultUIKeepAlive    = 15 * time.Second
)

// fillUI sets the status page's defaults on zero fields.
func (c *Config) fillUI() {
	if c.UIRecentEvents == 0 {
		c.UIRecentEvents = DefaultUIRecentEvents
	}
	if c.UIStreamQueue == 0 {
		c.UIStreamQueue = DefaultUIStreamQueue
	}
	if c.UIMaxStreams == 0 {
		c.UIMaxStreams = DefaultUIMaxStreams
	}
	if c.UIKeepAlive == 0 {
		c.UIKeepAlive = DefaultUIKeepAlive
	}
}

func (c *Config) validateUI() error {
	if c.UIStreamQueue < 1 || c.UIMaxStreams < 1 || c.UIKeepAlive < 0 {
		return fmt.Errorf("ui stream queue (%d) and max streams (%d) must be at least 1, keep-alive (%v) not negative",
			c.UIStreamQueue, c.UIMaxStreams, c.UIKeepAlive)
	}
	return nil
}

// uiSummaryMaxAge bounds how often the summary walks the replica
// (O(records)), however many pages poll it.
const uiSummaryMaxAge = 250 * time.Millisecond

var (
	errFeedStopped    = errors.New("node: the gateway is draining")
	errTooManyStreams = errors.New("node: too many status-page streams are open")
)

// Membership is implemented by a Cluster that can list its members
// (gossip.Cluster does); the status page shows them. MemberStates must be
// safe for concurrent use; the node never calls it with its lock held.
type Membership interface {
	MemberStates() []MemberState
}

// MemberState is one cluster member as the status page shows it. It is
// defined in package cluster, which gossip shares without importing node.
type MemberState = cluster.MemberState

// GatewaySessions is the number of sessions of one gateway that are active
// in this node's projection.
type GatewaySessions struct {
	Gateway  string `json:"gateway"`
	Sessions int    `json:"sessions"`
	Self     bool   `json:"self"`
}

// UISummary is what the status page shows besides the events (GET
// /v1/ui/summary).
type UISummary struct {
	Node     string    `json:"node"`
	Time     time.Time `json:"time"`
	Draining bool      `json:"draining"`
	// Standalone is true when the node has no cluster: Members is the node
	// alone.
	Standalone bool          `json:"standalone"`
	Members    []MemberState `json:"members"`
	// Gateways lists every member and every gateway owning an active
	// session in this node's projection, sorted by name. Counts, never
	// sessions: a gateway may hold a hundred thousand.
	Gateways      []GatewaySessions `json:"gateways"`
	Sessions      int               `json:"sessions"`       // active sessions in the projection, all gateways
	LocalSessions int               `json:"local_sessions"` // active sessions this node owns
	Connections   int               `json:"connections"`    // open client connections
	Feed          *FeedStats        `json:"feed,omitempty"` // absent when the feed is off
	// Regions is what this gateway knows of its region's bridges and the
	// other regions; absent in a single-region cluster.
	Regions *RegionStatus `json:"regions,omitempty"`
}

// uiSummaryCache holds the last summary for uiSummaryMaxAge.
type uiSummaryCache struct {
	mu sync.Mutex
	at time.Time // real time it was computed
	v  UISummary
}

// handleUI mounts the status page and its data endpoints on mux. The data
// endpoints are operator views: each needs what the node-wide read routes
// need (requireRead), inside Config.UIAuth when that is set.
func (n *Node) handleUI(mux *routeMux) {
	mux.Handle("GET /ui/", uiPage())
	for pattern, h := range n.uiHandlers() {
		if n.cfg.UIAuth != nil {
			h = n.cfg.UIAuth(h)
		}
		// Operator data: the admin token (or a backend token), like
		// /v1/sessions; open on a Dev node.
		mux.Handle(pattern, n.requireRead(h, nodeWide))
	}
}

// uiHandlers returns the status page's data endpoints, by http.ServeMux
// pattern, unwrapped (handleUI wraps them).
func (n *Node) uiHandlers() map[string]http.Handler {
	return map[string]http.Handler{
		"GET /v1/ui/summary": http.HandlerFunc(n.handleUISummary),
		"GET /v1/ui/events":  http.HandlerFunc(n.handleUIEvents),
	}
}

// uiPage serves the embedded page under /ui/. The page holds no data, so
// it is never behind UIAuth: it could not ask for the token otherwise.
func uiPage() http.Handler {
	sub, err := fs.Sub(uiFiles, "ui")
	if err != nil {
		panic(fmt.Sprintf("node: embedded ui: %v", err)) // the embed directive guarantees it
	}
	files := http.StripPrefix("/ui/", http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		// Everything the page needs comes from this origin; nothing else may
		// be loaded, framed or sent to.
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; "+
			"connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}

// StatusSummary returns what the status page shows besides the events. It
// walks the replica at most once per uiSummaryMaxAge; within that it
// returns the summary it computed last.
func (n *Node) StatusSummary() UISummary {
	c := &n.uiCache
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.at.IsZero() && time.Since(c.at) < uiSummaryMaxAge {
		return c.v
	}
	c.v, c.at = n.statusSummary(), time.Now()
	return c.v
}

func (n *Node) statusSummary() UISummary {
	var members []MemberState
	cl := n.getCluster()
	if m, ok := cl.(Membership); ok {
		members = m.MemberStates() // outside mu: it may ask the node for its session count
	}
	var regions *RegionStatus
	if rs, ok := n.regionStatus(); ok {
		regions = &rs
	}
	lk := lockOf(&n.mu)
	defer lk.unlock()
	counts := n.replica.ActiveByGateway()
	s := UISummary{Node: n.cfg.Name, Time: n.clock.Now(), Draining: n.draining, Standalone: cl == nil,
		LocalSessions: n.localCount, Connections: len(n.conns)}
	lk.unlock()
	if members == nil {
		self := MemberState{Name: n.cfg.Name, State: "alive", Sessions: s.LocalSessions, Self: true}
		if n.ln != nil {
			self.ClientAddr = n.ln.Addr().String()
		}
		members = []MemberState{self}
	}
	s.Members = members
	s.Regions = regions
	for _, m := range members {
		if _, ok := counts[m.Name]; !ok {
			counts[m.Name] = 0
		}
	}
	for _, g := range slices.Sorted(maps.Keys(counts)) {
		s.Gateways = append(s.Gateways, GatewaySessions{Gateway: g, Sessions: counts[g], Self: g == n.cfg.Name})
		s.Sessions += counts[g]
	}
	if n.feed != nil {
		st := n.feed.stats()
		s.Feed = &st
	}
	return s
}

func (n *Node) handleUISummary(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	n.writeJSON(w, http.StatusOK, n.StatusSummary())
}

// uiSnapshot is the data of a stream's first event.
type uiSnapshot struct {
	Node   string           `json:"node"`
	Events []PresenceChange `json:"events"`
	Feed   FeedStats        `json:"feed"`
	// KeepAliveMS is the keep-alive interval in milliseconds: a stream
	// silent for several of them is dead.
	KeepAliveMS int64 `json:"keep_alive_ms"`
}

// handleUIEvents streams presence changes as server-sent events (see the
// comment at the top of this file). It returns when the client goes away,
// when a write does not finish within Config.WriteTimeout (a reader that
// stopped reading), or when the gateway drains or closes.
func (n *Node) handleUIEvents(w http.ResponseWriter, r *http.Request) {
	if n.feed == nil {
		n.writeJSON(w, http.StatusNotFound, map[string]string{"error": "the presence feed is off on this gateway"})
		return
	}
	snapshot, s, err := n.feed.subscribe()
	if err != nil {
		w.Header().Set("Retry-After", "2")
		n.writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
		return
	}
	defer n.feed.unsubscribe(s)
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
	sw.event("snapshot", 0, uiSnapshot{Node: n.cfg.Name, Events: snapshot, Feed: n.feed.stats(),
		KeepAliveMS: n.cfg.UIKeepAlive.Milliseconds()})
	if err := sw.flush(); err != nil {
		n.log.Debug("ui stream ended", zap.Error(err))
		return
	}
	keepAlive := time.NewTicker(n.cfg.UIKeepAlive)
	defer keepAlive.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-n.feed.stopped:
			sw.begin()
			sw.event("end", 0, map[string]string{"reason": "draining"})
			_ = sw.flush()
			return
		case <-keepAlive.C:
			sw.begin()
			sw.reportDrops(s)
			sw.comment("keep-alive")
		case c := <-s.ch:
			sw.begin()
			sw.reportDrops(s)
			sw.event("presence", c.Version, c)
			for range len(s.ch) {
				c := <-s.ch
				sw.event("presence", c.Version, c)
			}
			sw.reportDrops(s)
		}
		if err := sw.flush(); err != nil {
			n.log.Debug("ui stream ended", zap.Error(err))
			return
		}
	}
}

// sseWriter writes server-sent events, keeping the first error.
type sseWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	err     error
}

// begin gives the writes up to the next flush one timeout: a reader that
// stops reading ends its stream rather than holding a goroutine forever.
func (sw *sseWriter) begin() {
	if err := sw.rc.SetWriteDeadline(time.Now().Add(sw.timeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		sw.fail(err)
	}
}

func (sw *sseWriter) fail(err error) {
	if sw.err == nil {
		sw.err = err
	}
}

func (sw *sseWriter) write(s string) {
	if sw.err != nil {
		return
	}
	if _, err := sw.w.Write([]byte(s)); err != nil {
		sw.fail(fmt.Errorf("write: %w", err))
	}
}

// event writes one event; id 0 writes none.
func (sw *sseWriter) event(name string, id uint64, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		sw.fail(fmt.Errorf("encode %s event: %w", name, err))
		return
	}
	sw.write("event: " + name + "\n")
	if id != 0 {
		sw.write("id: " + utoa(id) + "\n")
	}
	sw.write("data: " + string(b) + "\n\n")
}

func (sw *sseWriter) comment(text string) { sw.write(": " + text + "\n\n") }

// reportDrops tells the reader how many changes its queue could not take
// since it was last told.
func (sw *sseWriter) reportDrops(s *feedStream) {
	if d := s.dropped.Swap(0); d > 0 {
		sw.event("dropped", 0, map[string]uint64{"dropped": d})
	}
}

func (sw *sseWriter) flush() error {
	if sw.err == nil {
		if err := sw.rc.Flush(); err != nil {
			sw.fail(fmt.Errorf("flush: %w", err))
		}
	}
	return sw.err
}
