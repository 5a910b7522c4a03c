package node

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rollcall/rollcall/crdt"
)

// sseEvent is one server-sent event as a test reads it.
type sseEvent struct {
	name, id, data string
}

// sseStream reads a status-page event stream.
type sseStream struct {
	t      testing.TB
	resp   *http.Response
	cancel context.CancelFunc
	events chan sseEvent // closed at the end of the stream
}

// openEvents opens GET /v1/ui/events and reads it in the background.
func openEvents(t testing.TB, n *Node, header http.Header) *sseStream {
	t.Helper()
	return openSSE(t, "http://"+n.HTTPAddr().String()+"/v1/ui/events", header)
}

// openSSE opens an event stream at url and reads it in the background.
func openSSE(t testing.TB, url string, header http.Header) *sseStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	s := &sseStream{t: t, resp: resp, cancel: cancel, events: make(chan sseEvent, 4096)}
	t.Cleanup(s.close)
	if resp.StatusCode != http.StatusOK {
		return s
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("events content type %q", ct)
	}
	go func() {
		defer close(s.events)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<16), 1<<22)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.name != "" || ev.data != "" {
					s.events <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, ":"):
				s.events <- sseEvent{name: "comment", data: strings.TrimSpace(line[1:])}
			case strings.HasPrefix(line, "event: "):
				ev.name = line[len("event: "):]
			case strings.HasPrefix(line, "id: "):
				ev.id = line[len("id: "):]
			case strings.HasPrefix(line, "data: "):
				ev.data = line[len("data: "):]
			}
		}
	}()
	return s
}

func (s *sseStream) close() {
	s.cancel()
	s.resp.Body.Close()
}

// next returns the next event that is not a comment; ok is false at the end
// of the stream. It fails the test after 5s.
func (s *sseStream) next() (sseEvent, bool) {
	s.t.Helper()
	timer := time.NewTimer(5 * time.Second)
	defer timer.Stop()
	for {
		select {
		case ev, ok := <-s.events:
			if !ok {
				return sseEvent{}, false
			}
			if ev.name == "comment" {
				continue
			}
			return ev, true
		case <-timer.C:
			s.t.Fatal("no event on the status stream within 5s")
		}
	}
}

// expect returns the next event, which must be called name, decoded into v.
func (s *sseStream) expect(name string, v any) sseEvent {
	s.t.Helper()
	ev, ok := s.next()
	if !ok {
		s.t.Fatalf("stream ended while waiting for %q", name)
	}
	if ev.name != name {
		s.t.Fatalf("want event %q, got %q: %s", name, ev.name, ev.data)
	}
	if v != nil {
		if err := json.Unmarshal([]byte(ev.data), v); err != nil {
			s.t.Fatalf("%s event %q: %v", name, ev.data, err)
		}
	}
	return ev
}

// expectPresence returns the next presence event, which must be about user.
func (s *sseStream) expectPresence(user string) PresenceChange {
	s.t.Helper()
	var c PresenceChange
	ev := s.expect("presence", &c)
	if c.User != user {
		s.t.Fatalf("want a change of %s, got %+v", user, c)
	}
	if ev.id != utoa(c.Version) {
		s.t.Fatalf("event id %q, version %d", ev.id, c.Version)
	}
	return c
}

func uiNode(t *testing.T, mut func(*Config)) *Node {
	t.Helper()
	return newTestNode(t, func(c *Config) {
		c.HTTPAddr = "127.0.0.1:0"
		if mut != nil {
			mut(c)
		}
	})
}

// TestFeedRingKeepsTheNewest: the ring holds the last UIRecentEvents
// changes, oldest first; older ones are overwritten and counted.
func TestFeedRingKeepsTheNewest(t *testing.T) {
	f := newFeed(3, 8, 1)
	for i := range 5 {
		f.publish([]PresenceChange{{User: fmt.Sprintf("u%d", i), Version: uint64(i + 1)}})
	}
	got := f.recent()
	if len(got) != 3 || got[0].User != "u2" || got[1].User != "u3" || got[2].User != "u4" {
		t.Fatalf("ring holds %+v, want u2 u3 u4", got)
	}
	if st := f.stats(); st.Size != 3 || st.Recorded != 5 || st.Overwritten != 2 {
		t.Fatalf("stats %+v, want size 3, 5 recorded, 2 overwritten", st)
	}

	// A node's snapshot is the same ring.
	n := uiNode(t, func(c *Config) { c.UIRecentEvents = 3 })
	for i := range 5 {
		c, _ := connect(t, n, fmt.Sprintf("u%d", i), "phone")
		_ = c
		waitFor(t, "the change recorded", func() bool { return n.feed.stats().Recorded == uint64(i+1) })
	}
	var snap uiSnapshot
	openEvents(t, n, nil).expect("snapshot", &snap)
	if len(snap.Events) != 3 || snap.Events[0].User != "u2" || snap.Events[2].User != "u4" || snap.Feed.Overwritten != 2 {
		t.Fatalf("snapshot %+v", snap)
	}
	for i := 1; i < len(snap.Events); i++ {
		if snap.Events[i].Version <= snap.Events[i-1].Version {
			t.Fatalf("snapshot versions not increasing: %+v", snap.Events)
		}
	}
}

// TestFeedSeesLocalAndRemoteChanges: the feed records every presence
// change the projection sees, whether or not anyone subscribes: a local
// client's connect, status change and disconnect, a remote gateway's
// session, and that gateway marked down.
func TestFeedSeesLocalAndRemoteChanges(t *testing.T) {
	n := uiNode(t, nil)
	s := openEvents(t, n, nil)
	var snap uiSnapshot
	s.expect("snapshot", &snap)
	if snap.Node != "n1" || len(snap.Events) != 0 || snap.KeepAliveMS != DefaultUIKeepAlive.Milliseconds() {
		t.Fatalf("snapshot %+v", snap)
	}

	a, _ := connect(t, n, "alice", "phone")
	if c := s.expectPresence("alice"); !c.Online || c.Status != "available" || !c.Local || c.Sessions != 1 ||
		len(c.Gateways) != 1 || c.Gateways[0] != "n1" || c.Time.IsZero() {
		t.Fatalf("connect: %+v", c)
	}
	a.ok(map[string]any{"op": "status", "status": "away"})
	if c := s.expectPresence("alice"); c.Status != "away" {
		t.Fatalf("status: %+v", c)
	}
	a.call(map[string]any{"op": "hb"}) // no change: no event
	a.nc.Close()
	if c := s.expectPresence("alice"); c.Online || c.Status != "offline" || !c.Local || c.Gateways[0] != "n1" {
		t.Fatalf("disconnect: %+v", c)
	}

	rm := newRemote(t, "n2")
	if err := n.ApplyDeltas([]crdt.Delta{rm.put("bob", "desk", 1, crdt.StateActive, crdt.StatusBusy)}); err != nil {
		t.Fatal(err)
	}
	if c := s.expectPresence("bob"); !c.Online || c.Local || c.Gateways[0] != "n2" {
		t.Fatalf("remote session: %+v", c)
	}
	n.MarkNodeDown("n2")
	if c := s.expectPresence("bob"); c.Online || c.Local || len(c.Gateways) != 1 || c.Gateways[0] != "n2" {
		t.Fatalf("remote gateway down: %+v", c)
	}
	if st := n.StatusSummary(); st.Feed == nil || st.Feed.Recorded != 5 || st.Feed.Streams != 1 {
		t.Fatalf("summary feed %+v", st.Feed)
	}
}

// stallingWriter is a ResponseWriter whose reader stops reading after the
// first flush: every later Write or Flush blocks until release.
type stallingWriter struct {
	http.ResponseWriter
	flushed chan struct{} // closed at the first flush
	release chan struct{}
	once    sync.Once
	stalled bool
}

func (w *stallingWriter) Write(b []byte) (int, error) {
	if w.stalled {
		<-w.release
	}
	return w.ResponseWriter.Write(b)
}

func (w *stallingWriter) Flush() {
	if w.stalled {
		<-w.release
	}
	w.ResponseWriter.(http.Flusher).Flush()
	w.stalled = true
	w.once.Do(func() { close(w.flushed) })
}

func (w *stallingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// TestStalledStreamDoesNotBlockFanOut: a status-page reader that stops
// reading holds no one up: every change still reaches a protocol
// subscriber, the changes its queue cannot take are counted, and once it
// reads again the stream says how many it missed.
func TestStalledStreamDoesNotBlockFanOut(t *testing.T) {
	stall := &stallingWriter{flushed: make(chan struct{}), release: make(chan struct{})}
	var stalling sync.Once
	n := uiNode(t, func(c *Config) {
		c.UIStreamQueue = 4
		c.UIAuth = func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/v1/ui/events" {
					h.ServeHTTP(w, r)
					return
				}
				stalling.Do(func() {
					stall.ResponseWriter = w
					w = stall
				})
				h.ServeHTTP(w, r)
			})
		}
	})
	s := openEvents(t, n, nil)
	s.expect("snapshot", nil)
	<-stall.flushed

	a, _ := connect(t, n, "alice", "phone")
	watcher, _ := connect(t, n, "watcher", "desk")
	watcher.ok(map[string]any{"op": "sub", "users": []string{"alice"}})
	watcher.expectEvent("alice") // the sub's snapshot
	const changes = 60
	statuses := []string{"away", "available"}
	for i := range changes {
		want := statuses[i%2]
		a.ok(map[string]any{"op": "status", "status": want})
		// within 5s, while the stream is stalled
		if got := watcher.expectEvent("alice").str("status"); got != want {
			t.Fatalf("change %d: subscriber saw %s, want %s", i, got, want)
		}
	}
	st := n.feed.stats()
	if st.StreamDrops == 0 || st.Recorded < changes {
		t.Fatalf("feed %+v: want drops counted for the stalled stream", st)
	}

	close(stall.release)
	var dropped struct{ Dropped uint64 }
	for {
		ev, ok := s.next()
		if !ok {
			t.Fatal("stream ended before reporting its drops")
		}
		if ev.name == "dropped" {
			if err := json.Unmarshal([]byte(ev.data), &dropped); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	// Read again: a change recorded after the first reading (the
	// watcher's own session, a coalesced flush) may have been dropped too.
	if counted := n.feed.stats().StreamDrops; dropped.Dropped == 0 || dropped.Dropped > counted {
		t.Fatalf("stream reported %d dropped, feed counted %d", dropped.Dropped, counted)
	}
}

// TestStreamEndsOnDrainAndDisconnect: a drain ends every stream with an
// end event and refuses new ones; a reader that goes away is forgotten.
func TestStreamEndsOnDrainAndDisconnect(t *testing.T) {
	n := uiNode(t, func(c *Config) { c.UIKeepAlive = 20 * time.Millisecond })
	gone := openEvents(t, n, nil)
	gone.expect("snapshot", nil)
	for {
		ev := <-gone.events
		if ev.name == "comment" && ev.data == "keep-alive" {
			break
		}
	}
	gone.close()
	waitFor(t, "the closed stream forgotten", func() bool { return n.feed.stats().Streams == 0 })

	s := openEvents(t, n, nil)
	s.expect("snapshot", nil)
	drained := make(chan error, 1)
	go func() { drained <- n.Drain(context.Background()) }()
	var end struct{ Reason string }
	s.expect("end", &end)
	if end.Reason != "draining" {
		t.Fatalf("end reason %q", end.Reason)
	}
	if ev, ok := s.next(); ok {
		t.Fatalf("stream went on after its end: %+v", ev)
	}
	if err := <-drained; err != nil {
		t.Fatal(err)
	}
	late := openEvents(t, n, nil)
	if late.resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("stream opened while draining: %d", late.resp.StatusCode)
	}
	if !n.StatusSummary().Draining {
		t.Fatal("summary does not say draining")
	}
}

// fakeMembership is a cluster that lists members.
type fakeMembership struct {
	fakeCluster
	mu      sync.Mutex
	members []MemberState
}

func (f *fakeMembership) MemberStates() []MemberState {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]MemberState(nil), f.members...)
}

// TestSummary: a standalone gateway lists itself; a clustered one lists its
// cluster's members and counts the sessions of every gateway in its
// projection, as counts however many there are.
func TestSummary(t *testing.T) {
	standalone := uiNode(t, nil)
	connect(t, standalone, "alice", "phone")
	var s UISummary
	waitFor(t, "alice counted", func() bool {
		getJSON(t, "http://"+standalone.HTTPAddr().String()+"/v1/ui/summary", http.StatusOK, &s)
		return s.LocalSessions == 1 && s.Sessions == 1
	})
	if !s.Standalone || len(s.Members) != 1 || s.Members[0].Name != "n1" || !s.Members[0].Self ||
		s.Members[0].ClientAddr != standalone.ClientAddr().String() || s.Members[0].State != "alive" ||
		len(s.Gateways) != 1 || s.Gateways[0] != (GatewaySessions{Gateway: "n1", Sessions: 1, Self: true}) || s.Connections != 1 {
		t.Fatalf("standalone summary %+v", s)
	}

	fm := &fakeMembership{members: []MemberState{
		{Name: "n1", State: "alive", ClientAddr: "10.0.0.1:7400", Self: true},
		{Name: "n2", State: "alive", ClientAddr: "10.0.0.2:7400", Sessions: 3000},
		{Name: "n3", State: "dead", ClientAddr: "10.0.0.3:7400", LeaseExpired: true},
	}}
	n := uiNode(t, func(c *Config) { c.Cluster = fm })
	rm := newRemote(t, "n2")
	const remote = 3000
	deltas := make([]crdt.Delta, 0, remote)
	for i := range remote {
		deltas = append(deltas, rm.put(fmt.Sprintf("user%04d", i), "phone", 1, crdt.StateActive, crdt.StatusAvailable))
	}
	if err := n.ApplyDeltas(deltas); err != nil {
		t.Fatal(err)
	}
	connect(t, n, "alice", "phone")
	body := ""
	waitFor(t, "the sessions counted", func() bool {
		resp, err := http.Get("http://" + n.HTTPAddr().String() + "/v1/ui/summary")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body = string(b)
		s = UISummary{}
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatal(err)
		}
		return s.Sessions == remote+1
	})
	want := []GatewaySessions{{Gateway: "n1", Sessions: 1, Self: true}, {Gateway: "n2", Sessions: remote}, {Gateway: "n3"}}
	if s.Standalone || len(s.Members) != 3 || s.Members[2].State != "dead" || !s.Members[2].LeaseExpired ||
		fmt.Sprint(s.Gateways) != fmt.Sprint(want) || s.LocalSessions != 1 {
		t.Fatalf("cluster summary %+v", s)
	}
	if len(body) > 4096 || strings.Contains(body, "user0001") {
		t.Fatalf("the summary lists sessions (%d bytes): %.300s", len(body), body)
	}
}

// TestUIAuthGuardsTheDataEndpoints: with UIAuth set, the summary and the
// stream need what it checks; the page itself is served to anyone (it
// holds no data, and asks for the token).
func TestUIAuthGuardsTheDataEndpoints(t *testing.T) {
	n := uiNode(t, func(c *Config) {
		c.UIAuth = func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("Authorization") != "Bearer op-token" {
					http.Error(w, "unauthorized", http.StatusUnauthorized)
					return
				}
				h.ServeHTTP(w, r)
			})
		}
	})
	base := "http://" + n.HTTPAddr().String()
	for _, path := range []string{"/v1/ui/summary", "/v1/ui/events"} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("GET %s without a token: %d, want 401", path, resp.StatusCode)
		}
	}
	var s UISummary
	req, _ := http.NewRequest(http.MethodGet, base+"/v1/ui/summary", nil)
	req.Header.Set("Authorization", "Bearer op-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil || resp.StatusCode != http.StatusOK || s.Node != "n1" {
		t.Fatalf("summary with the token: %d %v %+v", resp.StatusCode, err, s)
	}
	resp.Body.Close()
	openEvents(t, n, http.Header{"Authorization": {"Bearer op-token"}}).expect("snapshot", nil)

	for _, path := range []string{"/ui/", "/ui/app.js", "/ui/style.css"} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || len(b) == 0 {
			t.Fatalf("GET %s: %d", path, resp.StatusCode)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "connect-src 'self'") {
			t.Fatalf("GET %s: CSP %q", path, csp)
		}
	}
}

// TestUILimitsAndOff: streams past UIMaxStreams are refused; with the feed
// off the stream is 404 and the summary still works.
func TestUILimitsAndOff(t *testing.T) {
	n := uiNode(t, func(c *Config) { c.UIMaxStreams = 1 })
	openEvents(t, n, nil).expect("snapshot", nil)
	if s := openEvents(t, n, nil); s.resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("second stream: %d, want 503", s.resp.StatusCode)
	}

	off := uiNode(t, func(c *Config) { c.UIRecentEvents = -1 })
	if s := openEvents(t, off, nil); s.resp.StatusCode != http.StatusNotFound {
		t.Fatalf("stream with the feed off: %d, want 404", s.resp.StatusCode)
	}
	w, _ := connect(t, off, "watcher", "desk")
	w.ok(map[string]any{"op": "sub", "users": []string{"alice"}})
	w.expectEvent("alice")
	connect(t, off, "alice", "phone")
	if ev := w.expectEvent("alice"); ev.str("status") != "available" {
		t.Fatalf("event with the feed off: %v", ev)
	}
	if s := off.StatusSummary(); s.Feed != nil || s.Members[0].Name != "n1" {
		t.Fatalf("summary with the feed off: %+v", s)
	}
}

// TestUIConfigRejectsNonsense: the status page's limits must be usable.
func TestUIConfigRejectsNonsense(t *testing.T) {
	for name, mut := range map[string]func(*Config){
		"queue":      func(c *Config) { c.UIStreamQueue = -1 },
		"streams":    func(c *Config) { c.UIMaxStreams = -1 },
		"keep-alive": func(c *Config) { c.UIKeepAlive = -time.Second },
	} {
		cfg := Config{Name: "n1", Dev: true}
		mut(&cfg)
		if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "ui stream queue") {
			t.Errorf("%s: New accepted it (%v)", name, err)
		}
	}
	c := DefaultConfig()
	if c.UIRecentEvents != DefaultUIRecentEvents || c.UIStreamQueue != DefaultUIStreamQueue ||
		c.UIMaxStreams != DefaultUIMaxStreams || c.UIKeepAlive != DefaultUIKeepAlive {
		t.Fatalf("defaults %+v", c)
	}
}

// TestFeedShowsStatusText: the status page's changes carry the status text
// and emoji, and a change of them alone is a change; going offline carries
// the last seen.
func TestFeedShowsStatusText(t *testing.T) {
	n := uiNode(t, nil)
	s := openEvents(t, n, nil)
	s.expect("snapshot", nil)
	a, _ := connect(t, n, "alice", "phone")
	if c := s.expectPresence("alice"); c.Text != "" || c.Emoji != "" {
		t.Fatalf("connect: %+v", c)
	}
	a.ok(map[string]any{"op": "account", "text": "on a call", "emoji": "📞"})
	if c := s.expectPresence("alice"); !c.Online || c.Text != "on a call" || c.Emoji != "📞" {
		t.Fatalf("text: %+v", c)
	}
	if c := presenceOf(n, "alice"); c.LastSeen != 0 {
		t.Fatalf("online with a last seen: %+v", c)
	}
	a.ok(map[string]any{"op": "bye"})
	c := s.expectPresence("alice")
	if seen := presenceOf(n, "alice").LastSeen; c.Online || c.Text != "on a call" || seen == 0 || c.LastSeen != n.formatTime(time.Unix(0, seen)) {
		t.Fatalf("offline: %+v, last seen %d", c, seen)
	}
}
