package node

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/rollcall/rollcall/auth"
	"github.com/rollcall/rollcall/protocol"
)

// openChanges opens GET /v1/events with query q.
func openChanges(t testing.TB, n *Node, q url.Values, header http.Header) *sseStream {
	t.Helper()
	return openSSE(t, "http://"+n.HTTPAddr().String()+"/v1/events?"+q.Encode(), header)
}

// expectEventOf returns the next event, which must be called name and be
// about user, with an id that is the token of its version.
func (s *sseStream) expectEventOf(n *Node, name, user string) (protocol.Event, sseEvent) {
	s.t.Helper()
	var e protocol.Event
	ev := s.expect(name, &e)
	if e.Op != protocol.OpEvent || e.User != user {
		s.t.Fatalf("want a %s event of %s, got %s", name, user, ev.data)
	}
	if ev.id != n.eventToken(e.Version) {
		s.t.Fatalf("event id %q, version %d", ev.id, e.Version)
	}
	return e, ev
}

// expectReady returns the ready event's id after checking whether it
// closes a snapshot.
func (s *sseStream) expectReady(snapshot bool) string {
	s.t.Helper()
	var r struct {
		Version  uint64 `json:"version"`
		Snapshot bool   `json:"snapshot"`
	}
	ev := s.expect("ready", &r)
	if r.Snapshot != snapshot || r.Version == 0 || ev.id == "" {
		s.t.Fatalf("ready: %s id %q, want snapshot %v", ev.data, ev.id, snapshot)
	}
	return ev.id
}

func users(u ...string) url.Values { return url.Values{"users": {strings.Join(u, ",")}} }

// TestEventStreamSnapshotThenLive: a stream starts with the current
// presence of every requested user, then carries each change, with ids
// that grow with the versions.
func TestEventStreamSnapshotThenLive(t *testing.T) {
	n := uiNode(t, func(c *Config) { c.UIKeepAlive = 20 * time.Millisecond })
	a, _ := connect(t, n, "alice", "phone")
	s := openChanges(t, n, users("bob", "alice"), nil)
	if got := s.resp.Header.Get("Content-Type"); got != "text/event-stream" {
		t.Fatalf("content type %q", got)
	}
	alice, _ := s.expectEventOf(n, "snapshot", "alice")
	bob, _ := s.expectEventOf(n, "snapshot", "bob")
	if !alice.Online || bob.Online || len(alice.Sessions) != 1 || alice.Sessions[0].Device != "phone" {
		t.Fatalf("snapshot: alice %+v, bob %+v", alice, bob)
	}
	s.expectReady(true)

	a.ok(map[string]any{"op": "status", "status": "away"})
	e, _ := s.expectEventOf(n, "presence", "alice")
	if e.Status != "away" || e.Version <= alice.Version {
		t.Fatalf("live event %+v after version %d", e, alice.Version)
	}
	b, _ := connect(t, n, "bob", "desk")
	if e, _ := s.expectEventOf(n, "presence", "bob"); !e.Online {
		t.Fatalf("bob's event %+v", e)
	}
	b.send(map[string]any{"op": "bye"})
	if e, _ := s.expectEventOf(n, "presence", "bob"); e.Online {
		t.Fatalf("bob's event after bye %+v", e)
	}
	for {
		if ev := <-s.events; ev.name == "comment" && ev.data == "ping" {
			break
		}
	}
	if m := n.Metrics(); m.EventStreams != 1 || m.EventStreamsOpened != 1 || m.EventStreamEvents != 5 {
		t.Fatalf("metrics: %d open, %d opened, %d events", m.EventStreams, m.EventStreamsOpened, m.EventStreamEvents)
	}
	s.close()
	waitFor(t, "the closed stream forgotten", func() bool {
		n.mu.Lock()
		defer n.mu.Unlock()
		return len(n.streams.open) == 0 && n.users["alice"] == nil && n.users["bob"] == nil
	})
}

// TestEventStreamGroup: a group's stream starts with its online members
// and then says who joins and leaves, as a group sub does.
func TestEventStreamGroup(t *testing.T) {
	n := uiNode(t, nil)
	connect(t, n, "alice", "phone", map[string]any{"groups": []string{"eng"}})
	connect(t, n, "carol", "phone", map[string]any{"groups": []string{"ops"}})
	s := openChanges(t, n, url.Values{"group": {"eng"}}, nil)
	if e, _ := s.expectEventOf(n, "snapshot", "alice"); e.Group != "eng" || e.Member == nil || !*e.Member {
		t.Fatalf("snapshot %+v", e)
	}
	s.expectReady(true)
	b, _ := connect(t, n, "bob", "desk", map[string]any{"groups": []string{"eng"}})
	if e, _ := s.expectEventOf(n, "presence", "bob"); e.Group != "eng" || !*e.Member {
		t.Fatalf("bob joined: %+v", e)
	}
	b.ok(map[string]any{"op": "leave", "group": "eng"})
	if e, _ := s.expectEventOf(n, "presence", "bob"); e.Group != "eng" || *e.Member {
		t.Fatalf("bob left: %+v", e)
	}
}

// TestEventStreamResume: Last-Event-ID (or last_event_id) resumes with the
// current presence of the requested users that changed since, and nothing
// else; an id the node does not know starts over with a snapshot.
func TestEventStreamResume(t *testing.T) {
	n := uiNode(t, nil)
	a, _ := connect(t, n, "alice", "phone")
	watcher, _ := connect(t, n, "watcher", "desk")
	watcher.ok(map[string]any{"op": "sub", "users": []string{"alice", "bob"}})
	watcher.expectEvent("alice")
	watcher.expectEvent("bob")

	s := openChanges(t, n, users("alice", "bob"), nil)
	s.expectEventOf(n, "snapshot", "alice")
	s.expectEventOf(n, "snapshot", "bob")
	id := s.expectReady(true)
	s.close()

	a.ok(map[string]any{"op": "status", "status": "busy"})
	watcher.expectEvent("alice") // the change is flushed, and logged
	connect(t, n, "carol", "phone")

	r := openChanges(t, n, users("alice", "bob"), http.Header{"Last-Event-ID": {id}})
	e, ev := r.expectEventOf(n, "presence", "alice")
	if e.Sessions[0].Status != "busy" {
		t.Fatalf("resumed with %+v", e)
	}
	r.expectReady(false)

	a.ok(map[string]any{"op": "status", "status": "away"})
	if e, _ := r.expectEventOf(n, "presence", "alice"); e.Sessions[0].Status != "away" {
		t.Fatalf("live after resume %+v", e)
	}
	r.close()

	// From the resumed event's id, by query parameter: only the newer
	// change comes.
	q := users("alice", "bob")
	q.Set("last_event_id", ev.id)
	p := openChanges(t, n, q, nil)
	if e, _ := p.expectEventOf(n, "presence", "alice"); e.Sessions[0].Status != "away" {
		t.Fatalf("resumed with %+v", e)
	}
	p.expectReady(false)

	n.mu.Lock()
	future := utoa(n.version+1_000_000) + "-" + utoa(n.origin.Incarnation)
	n.mu.Unlock()
	for _, bad := range []string{"12345-1", "garbage", future} {
		u := openChanges(t, n, users("alice", "bob"), http.Header{"Last-Event-ID": {bad}})
		u.expectEventOf(n, "snapshot", "alice")
		u.expectEventOf(n, "snapshot", "bob")
		u.expectReady(true)
	}
}

// TestChangeLogForgetsOldest: a version older than the log holds is not
// resumable.
func TestChangeLogForgetsOldest(t *testing.T) {
	l := changeLog{ring: make([]changeEntry, 3)}
	l.add(10, []string{"a", "b"})
	l.add(20, []string{"c"})
	if got, ok := l.since(10); !ok || len(got) != 3 {
		t.Fatalf("since 10: %v %v", got, ok)
	}
	l.add(30, []string{"d"}) // overwrites a@10
	if _, ok := l.since(10); ok {
		t.Fatal("resumable from a version partly overwritten")
	}
	if got, ok := l.since(11); !ok || len(got) != 2 {
		t.Fatalf("since 11: %v %v", got, ok)
	}
	if got, ok := l.since(31); !ok || len(got) != 0 {
		t.Fatalf("since 31: %v %v", got, ok)
	}
}

// TestEventStreamAuthorization: a client token reads what its grants
// allow, a backend token and the admin token read everything; anything
// else is refused with a JSON error, and bad subjects with 400.
func TestEventStreamAuthorization(t *testing.T) {
	n, clock := newAuthNode(t, func(c *Config) {
		c.HTTPAddr = "127.0.0.1:0"
		c.AdminToken = []byte(testAdminToken)
	})
	signer := secretSigner(t)
	alice := mint(t, signer, auth.TokenSpec{User: "alice"}, clock.Now())
	backend := mint(t, signer, auth.TokenSpec{User: "svc", Grants: &auth.GrantsClaim{Backend: true}}, clock.Now())
	base := "http://" + n.HTTPAddr().String() + "/v1/events?"

	for _, tc := range []struct {
		name, query, token string
		want               int
		says               string
	}{
		{"no token", "users=alice", "", http.StatusUnauthorized, "missing credentials"},
		{"a forged token", "users=alice", "x.y.z", http.StatusUnauthorized, "not valid"},
		{"alice's token for bob", "users=alice,bob", alice, http.StatusForbidden, "reading bob"},
		{"alice's token for a group", "group=eng", alice, http.StatusForbidden, "group eng"},
		{"no subjects", "", backend, http.StatusBadRequest, "want users and/or group"},
		{"an empty user", "users=alice,,bob", backend, http.StatusBadRequest, "missing user"},
		{"an empty group", "group=", backend, http.StatusBadRequest, "group is empty"},
		{"a bad group", "group=%01", backend, http.StatusBadRequest, "control character"},
		{"too many users", "users=" + strings.Repeat("u,", protocol.MaxUsersPerRequest) + "u", backend, http.StatusBadRequest, "at most"},
	} {
		code, challenge, body := httpDo(t, http.DefaultClient, "GET", base+tc.query, tc.token)
		var e struct{ Error, Code string }
		if code != tc.want || json.Unmarshal([]byte(body), &e) != nil || !strings.Contains(e.Error, tc.says) {
			t.Errorf("%s: %d %s, want %d saying %q", tc.name, code, body, tc.want, tc.says)
		}
		if code == http.StatusUnauthorized && !strings.HasPrefix(challenge, "Bearer") {
			t.Errorf("%s: challenge %q", tc.name, challenge)
		}
	}
	for _, tc := range []struct{ name, token string }{
		{"alice's token", alice}, {"a backend token", backend}, {"the admin token", testAdminToken},
	} {
		q := users("alice")
		if tc.token != alice {
			q.Set("group", "eng")
		}
		s := openChanges(t, n, q, http.Header{"Authorization": {"Bearer " + tc.token}})
		if s.resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d", tc.name, s.resp.StatusCode)
		}
		s.expectEventOf(n, "snapshot", "alice")
		s.expectReady(true)
		s.close()
	}
}

// TestSlowEventStreamEnds: a stream whose reader stops reading holds no
// one up; once its queue overflows it ends with slow_consumer, counted,
// and its watches are gone.
func TestSlowEventStreamEnds(t *testing.T) {
	n := uiNode(t, func(c *Config) { c.OutboundQueue = 4 })
	a, _ := connect(t, n, "alice", "phone")
	watcher, _ := connect(t, n, "watcher", "desk")
	watcher.ok(map[string]any{"op": "sub", "users": []string{"alice"}})
	watcher.expectEvent("alice")

	rec := httptest.NewRecorder()
	stall := &stallingWriter{ResponseWriter: rec, flushed: make(chan struct{}), release: make(chan struct{})}
	req := httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/v1/events?users=alice", nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		n.handleEvents(stall, req)
	}()
	<-stall.flushed // the snapshot is out; every later write blocks

	statuses := []string{"away", "available"}
	for i := range 20 {
		want := statuses[i%2]
		a.ok(map[string]any{"op": "status", "status": want})
		if got := watcher.expectEvent("alice").str("status"); got != want {
			t.Fatalf("change %d: subscriber saw %s, want %s", i, got, want)
		}
	}
	close(stall.release)
	<-done
	body := rec.Body.String()
	if !strings.Contains(body, "event: end\ndata: {\"reason\":\"slow_consumer\"}") {
		t.Fatalf("stream did not end as a slow consumer:\n%s", body)
	}
	if m := n.Metrics(); m.EventStreamsSlow != 1 || m.EventStreams != 0 {
		t.Fatalf("metrics: %d slow, %d open", m.EventStreamsSlow, m.EventStreams)
	}
	n.mu.Lock()
	subs := len(n.users["alice"].subs)
	n.mu.Unlock()
	if subs != 1 { // the watcher's
		t.Fatalf("alice has %d subscribers after the stream ended", subs)
	}
}

// TestEventStreamEndsOnDrain: draining ends every stream with end
// {"reason":"draining"} and refuses new ones.
func TestEventStreamEndsOnDrain(t *testing.T) {
	n := uiNode(t, nil)
	s := openChanges(t, n, users("alice"), nil)
	s.expectEventOf(n, "snapshot", "alice")
	s.expectReady(true)
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
	late := openChanges(t, n, users("alice"), nil)
	if late.resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("stream opened while draining: %d", late.resp.StatusCode)
	}
}
