package node

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rollcall/rollcall/auth"
	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/internal/testkit"
	"github.com/rollcall/rollcall/protocol"
)

// checkTrackedLocked checks the tracked-session indexes: every tracked
// session is active and ours in the replica at its epoch, and each owner's
// list holds exactly its sessions of n.tracked. The caller holds n.mu.
func checkTrackedLocked(t testing.TB, n *Node) {
	t.Helper()
	owners := map[*conn]int{}
	for k, ts := range n.tracked {
		if ts.key != k {
			t.Fatalf("tracked %s indexed under %s", ts.key, k)
		}
		s, ok := n.replica.Session(k)
		if !ok || s.State != crdt.StateActive || s.Origin != n.origin || s.Epoch != ts.epoch {
			t.Fatalf("tracked session %s (epoch %d) not active and ours in the replica: %+v", k, ts.epoch, s)
		}
		owners[ts.owner]++
	}
	for c, want := range owners {
		got := 0
		var prev *trackedSession
		for ts := c.tracks.head; ts != nil; ts = ts.next {
			if ts.prev != prev || n.tracked[ts.key] != ts {
				t.Fatalf("conn %d's list is broken at %s", c.id, ts.key)
			}
			prev = ts
			got++
		}
		if got != want || c.tracks.count != want {
			t.Fatalf("conn %d lists %d tracked sessions (count %d), n.tracked %d", c.id, got, c.tracks.count, want)
		}
	}
}

// trackReq is a track or untrack request of sessions.
func trackReq(op string, sessions ...map[string]any) map[string]any {
	return map[string]any{"op": op, "sessions": sessions}
}

// ses is one session of a track request.
func ses(user, device string, extra ...any) map[string]any {
	m := map[string]any{"user": user, "device": device}
	for i := 0; i+1 < len(extra); i += 2 {
		m[extra[i].(string)] = extra[i+1]
	}
	return m
}

// results returns a tracked or untracked reply's sessions, checking its op.
func results(t testing.TB, f frame, op string) []map[string]any {
	t.Helper()
	if f.str("op") != op {
		t.Fatalf("want %s, got %v", op, f)
	}
	raw, _ := f["sessions"].([]any)
	out := make([]map[string]any, len(raw))
	for i, r := range raw {
		out[i] = r.(map[string]any)
	}
	return out
}

// TestTrackAndUntrack: a backend's track opens sessions for other users
// (each with its own id and an epoch, its status, groups and meta, owned by
// this gateway) that subscribers see; a track of a session it tracks
// updates it in place; untrack ends sessions, and lists without an id the
// ones it does not track.
func TestTrackAndUntrack(t *testing.T) {
	start := time.Now()
	n := newTestNode(t, nil)
	w, _ := connect(t, n, "watcher", "w")
	w.ok(map[string]any{"op": "sub", "users": []string{"alice", "bob"}})
	w.expectEvent("alice")
	w.expectEvent("bob")
	be, _ := connect(t, n, "backend", "b1")

	rs := results(t, be.call(trackReq("track",
		ses("alice", "web", "status", "away", "groups", []string{"eng", "all"}, "meta", map[string]any{"tab": 1}),
		ses("bob", "web"))), protocol.OpTracked)
	if len(rs) != 2 || rs[0]["user"] != "alice" || rs[1]["user"] != "bob" {
		t.Fatalf("results %v", rs)
	}
	for _, r := range rs {
		if !strings.HasPrefix(r["session"].(string), "ses_") || !clockEpoch(r["epoch"].(float64), start) || r["code"] != nil {
			t.Fatalf("result %v", r)
		}
	}
	if rs[0]["session"] == rs[1]["session"] {
		t.Fatalf("two sessions share an id: %v", rs)
	}
	e := w.expectEvent("alice")
	if e["online"] != true || e.str("status") != "away" {
		t.Fatalf("event %v", e)
	}
	s0 := e["sessions"].([]any)[0].(map[string]any)
	if s0["gateway"] != "n1" || s0["session"] != rs[0]["session"] || s0["epoch"] != rs[0]["epoch"] || fmt.Sprint(s0["meta"]) != "map[tab:1]" {
		t.Fatalf("alice's session %v", s0)
	}
	w.expectEvent("bob")
	if f := w.call(map[string]any{"op": "group", "group": "eng"}); f.num("online") != 1 {
		t.Fatalf("group eng: %v", f)
	}
	if got := n.TrackedCount(); got != 2 {
		t.Fatalf("TrackedCount %d", got)
	}
	checkInvariants(t, n)

	// Tracked again: the same session, its status and groups set anew.
	again := results(t, be.call(trackReq("track", ses("alice", "web"))), protocol.OpTracked)
	if again[0]["session"] != rs[0]["session"] || again[0]["epoch"] != rs[0]["epoch"] {
		t.Fatalf("re-track %v, first %v", again, rs)
	}
	if e := w.expectEvent("alice"); e.str("status") != "available" {
		t.Fatalf("event %v", e)
	}
	if f := w.call(map[string]any{"op": "group", "group": "eng"}); f.num("online") != 0 {
		t.Fatalf("group eng after re-track without groups: %v", f)
	}
	if s, _ := sessionOf(n, crdt.Key{User: "alice", Device: "web"}); s.Seq != 2 || s.Meta != "" {
		t.Fatalf("alice's record %+v", s)
	}

	un := results(t, be.call(trackReq("untrack", ses("alice", "web"), ses("carol", "web"))), protocol.OpUntracked)
	if un[0]["session"] != rs[0]["session"] || un[0]["epoch"] != rs[0]["epoch"] || un[1]["session"] != nil || un[1]["epoch"] != nil {
		t.Fatalf("untrack %v", un)
	}
	if e := w.expectEvent("alice"); e["online"] != false {
		t.Fatalf("event %v", e)
	}
	if s, _ := sessionOf(n, crdt.Key{User: "alice", Device: "web"}); s.State != crdt.StateDisconnected {
		t.Fatalf("alice's record %+v", s)
	}
	if !presenceOf(n, "bob").Online || n.TrackedCount() != 1 {
		t.Fatalf("bob %+v, tracked %d", presenceOf(n, "bob"), n.TrackedCount())
	}
	checkInvariants(t, n)
}

// TestTrackedSessionsEndWithTheConnection: every session a connection
// tracks ends, disconnected, when it closes: more of them than one batch
// of writes holds.
func TestTrackedSessionsEndWithTheConnection(t *testing.T) {
	fc := &fakeCluster{}
	n := newTestNode(t, func(c *Config) { c.Cluster = fc; c.DisconnectGrace = time.Minute })
	be, _ := connect(t, n, "backend", "b1")
	const users = endTrackedBatch*2 + 100
	trackUsers(t, be, 0, users)
	if got := n.TrackedCount(); got != users {
		t.Fatalf("tracked %d", got)
	}
	checkInvariants(t, n)
	published := len(fc.published())
	be.nc.Close()
	waitFor(t, "tracked sessions ended", func() bool { return n.TrackedCount() == 0 })
	for i := range users {
		if s, _ := sessionOf(n, crdt.Key{User: "u" + strconv.Itoa(i), Device: "d"}); s.State != crdt.StateDisconnected {
			t.Fatalf("u%d: %+v", i, s)
		}
	}
	// One delta each, in a few Publish calls. A batch is published after
	// the node's lock is let go, so the count can trail TrackedCount.
	ended := func() int {
		n := 0
		for _, d := range fc.published()[published:] {
			if d.Session != nil && d.Session.User != "backend" && d.Session.State == crdt.StateDisconnected {
				n++
			}
		}
		return n
	}
	waitFor(t, "every end published", func() bool { return ended() >= users })
	if got := ended(); got != users {
		t.Fatalf("published %d ends of tracked sessions, want %d", got, users)
	}
	checkInvariants(t, n)
}

// trackUsers tracks users u<from>..u<to-1>, device d, in requests of
// MaxTrackPerRequest.
func trackUsers(t testing.TB, be *client, from, to int) {
	t.Helper()
	for lo := from; lo < to; lo += protocol.MaxTrackPerRequest {
		var batch []map[string]any
		for i := lo; i < min(to, lo+protocol.MaxTrackPerRequest); i++ {
			batch = append(batch, ses("u"+strconv.Itoa(i), "d"))
		}
		for _, r := range results(t, be.call(trackReq("track", batch...)), protocol.OpTracked) {
			if r["code"] != nil {
				t.Fatalf("track: %v", r)
			}
		}
	}
}

// TestTrackedSessionsShareTheConnectionsDeadline: heartbeats of the
// tracking connection keep its sessions online without a write; when it
// goes silent past the timeout, all of them expire with it.
func TestTrackedSessionsShareTheConnectionsDeadline(t *testing.T) {
	fc := &fakeCluster{}
	clock := newFakeClock()
	n := newTestNode(t, func(c *Config) {
		c.Cluster = fc
		c.Clock = clock
		c.Timeout = 10 * time.Second
		c.Heartbeat = 2 * time.Second
	})
	be, _ := connect(t, n, "backend", "b1")
	trackUsers(t, be, 0, 50)
	published := len(fc.published())
	for range 10 {
		clock.Advance(5 * time.Second)
		be.call(map[string]any{"op": "hb"}) // refreshes the deadline, like a plain hb
		waitSweeps(t, n)
	}
	if got := n.TrackedCount(); got != 50 || len(fc.published()) != published {
		t.Fatalf("after 50s of heartbeats: %d tracked, %d deltas published", got, len(fc.published())-published)
	}
	clock.Advance(11 * time.Second)
	be.expectError(protocol.CodeExpired)
	waitFor(t, "tracked sessions expired", func() bool { return n.TrackedCount() == 0 })
	for i := range 50 {
		if s, _ := sessionOf(n, crdt.Key{User: "u" + strconv.Itoa(i), Device: "d"}); s.State != crdt.StateExpired {
			t.Fatalf("u%d: %+v", i, s)
		}
	}
	checkInvariants(t, n)
}

// TestTrackEpochs: a tracked session takes its (user, device) from an
// older connection (closed superseded) and from another backend
// connection; a later hello of the (user, device), here or on another
// gateway, takes it back, and the backend forgets it without a write.
func TestTrackEpochs(t *testing.T) {
	fc := &fakeCluster{}
	n := newTestNode(t, func(c *Config) { c.Cluster = fc })
	phone, wel := connect(t, n, "alice", "phone")
	be, _ := connect(t, n, "backend", "b1")
	r := results(t, be.call(trackReq("track", ses("alice", "phone"))), protocol.OpTracked)[0]
	if r["epoch"].(float64) <= wel.num("epoch") {
		t.Fatalf("tracked epoch %v, connection's %v", r["epoch"], wel.num("epoch"))
	}
	phone.expectError(protocol.CodeSuperseded)
	if p := presenceOf(n, "alice"); !p.Online || p.Sessions[0].Session != r["session"] {
		t.Fatalf("alice %+v", p)
	}

	be2, _ := connect(t, n, "backend", "b2")
	r2 := results(t, be2.call(trackReq("track", ses("alice", "phone"))), protocol.OpTracked)[0]
	if r2["epoch"].(float64) <= r["epoch"].(float64) {
		t.Fatalf("second backend's epoch %v, first's %v", r2["epoch"], r["epoch"])
	}
	un := results(t, be.call(trackReq("untrack", ses("alice", "phone"))), protocol.OpUntracked)[0]
	if un["session"] != nil {
		t.Fatalf("the first backend untracked a session it lost: %v", un)
	}
	checkInvariants(t, n)

	// A hello here takes it back.
	_, wel2 := connect(t, n, "alice", "phone")
	if wel2.num("epoch") <= r2["epoch"].(float64) || n.TrackedCount() != 0 {
		t.Fatalf("hello epoch %v, tracked %d", wel2.num("epoch"), n.TrackedCount())
	}
	checkInvariants(t, n)

	// A newer record from another gateway takes a tracked session.
	r3 := results(t, be2.call(trackReq("track", ses("bob", "web"))), protocol.OpTracked)[0]
	rm := newRemote(t, "n2")
	if err := n.ApplyDeltas([]crdt.Delta{rm.put("bob", "web", uint64(r3["epoch"].(float64))+1, crdt.StateActive, crdt.StatusAway)}); err != nil {
		t.Fatal(err)
	}
	if n.TrackedCount() != 0 {
		t.Fatalf("tracked %d after a newer remote epoch", n.TrackedCount())
	}
	// And one learned by anti-entropy (a sync, which names users only).
	results(t, be2.call(trackReq("track", ses("carol", "web"))), protocol.OpTracked)
	held, _ := sessionOf(n, crdt.Key{User: "carol", Device: "web"})
	rm.put("carol", "web", held.Epoch+1, crdt.StateActive, crdt.StatusAvailable)
	if err := n.ApplySync(rm.r.Diff(n.Digest())); err != nil {
		t.Fatal(err)
	}
	if n.TrackedCount() != 0 {
		t.Fatalf("tracked %d after a newer epoch by sync", n.TrackedCount())
	}
	checkInvariants(t, n)
	be2.nc.Close()
	waitFor(t, "backend b2 gone", func() bool { return n.SessionCount() == 2 })
	if p := presenceOf(n, "bob"); !p.Online || p.Sessions[0].Gateway != "n2" {
		t.Fatalf("bob %+v", p)
	}
	checkInvariants(t, n)
}

// TestTrackRefusals: track and untrack need the backend grant; a request
// with no sessions, more than MaxTrackPerRequest, a bad or repeated
// (user, device), the connection's own session, or past the connection's
// cap or allowance does nothing, and the connection stays.
func TestTrackRefusals(t *testing.T) {
	n, clock := newAuthNode(t, func(c *Config) {
		c.MaxTrackedPerConnection = 1500
		c.TrackRate = 100
		c.TrackBurst = 2000
	})
	s := secretSigner(t)
	alice, _ := connect(t, n, "alice", "d", map[string]any{"token": mint(t, s, auth.TokenSpec{User: "alice", Grants: &auth.GrantsClaim{Read: []string{"*"}}}, clock.Now())})
	expectForbidden(t, alice, trackReq("track", ses("bob", "d")), "track (grant backend")
	expectForbidden(t, alice, trackReq("untrack", ses("bob", "d")), "untrack (grant backend")

	be, _ := connect(t, n, "svc", "d", map[string]any{"token": mint(t, s, auth.TokenSpec{User: "svc", Grants: &auth.GrantsClaim{Backend: true}}, clock.Now())})
	many := make([]map[string]any, 2*protocol.MaxTrackPerRequest)
	for i := range many {
		many[i] = ses("u"+strconv.Itoa(i), "d")
	}
	for _, tc := range []struct {
		req  map[string]any
		says string
	}{
		{map[string]any{"op": "track"}, "want sessions"},
		{trackReq("track", many[:1001]...), "1001 sessions: at most 1000 per request"},
		{trackReq("untrack", many[:1001]...), "1001 sessions: at most 1000 per request"},
		{trackReq("track", ses("a", "d"), ses("a", "d")), "sessions[1]: a/d is listed twice"},
		{trackReq("track", ses("a", "")), "sessions[0]: missing device"},
		{trackReq("track", ses("", "d")), "sessions[0]: missing user"},
		{trackReq("track", ses("a", "d"), ses("b", "d", "status", "gone")), "sessions[1]: unknown device status"},
		{trackReq("track", ses("a", "d", "groups", []string{"x\x01"})), "sessions[0]: group contains a control character"},
		{trackReq("track", ses("a", "d", "meta", []int{1})), "sessions[0]: meta"},
		{trackReq("track", ses("a", "d", "meta", map[string]any{"k": strings.Repeat("x", protocol.MaxMetaBytes)})), "sessions[0]: meta of"},
		{trackReq("track", ses("svc", "d")), "this connection's own session"},
	} {
		f := be.call(tc.req)
		if f.str("code") != string(protocol.CodeBadRequest) || !strings.Contains(f.str("message"), tc.says) {
			t.Fatalf("%.80v: want bad_request saying %q, got %.200v", tc.req, tc.says, f)
		}
	}
	if n.TrackedCount() != 0 {
		t.Fatalf("refused requests tracked %d sessions", n.TrackedCount())
	}
	// The cap: 1000 fit, 1000 more do not; re-tracking held ones adds none.
	trackUsers(t, be, 0, 1000)
	f := be.call(trackReq("track", many[1000:]...))
	if f.str("code") != string(protocol.CodeBadRequest) || !strings.Contains(f.str("message"), "tracks 1000 sessions and the request adds 1000: at most 1500 per connection") {
		t.Fatalf("past the cap: %.200v", f)
	}
	// The allowance: 2000 at once, 1000 of them taken.
	trackUsers(t, be, 500, 1500)
	f = be.call(trackReq("untrack", many[:100]...))
	if f.str("code") != string(protocol.CodeRateLimited) || !strings.Contains(f.str("message"), "at most 100 sessions tracked or untracked per second (2000 at once)") {
		t.Fatalf("past the allowance: %.200v", f)
	}
	clock.Advance(time.Second)
	if un := results(t, be.call(trackReq("untrack", many[:100]...)), protocol.OpUntracked); un[99]["session"] == nil {
		t.Fatalf("untrack after the wait: %v", un[99])
	}
	if n.TrackedCount() != 1400 {
		t.Fatalf("tracked %d", n.TrackedCount())
	}
	checkInvariants(t, n)
}

// TestTrackRespectsTheUserCap: a tracked session counts against its user's
// MaxSessionsPerUser; a session past it is refused alone, in its entry.
func TestTrackRespectsTheUserCap(t *testing.T) {
	n := newTestNode(t, func(c *Config) { c.MaxSessionsPerUser = 2 })
	connect(t, n, "alice", "phone")
	be, _ := connect(t, n, "backend", "b1")
	rs := results(t, be.call(trackReq("track", ses("alice", "web"), ses("alice", "tv"), ses("alice", "phone"))), protocol.OpTracked)
	if rs[0]["session"] == nil || rs[1]["code"] != string(protocol.CodeTooManySessions) || rs[1]["session"] != nil || rs[2]["session"] == nil {
		t.Fatalf("results %v", rs)
	}
	checkInvariants(t, n)
}

// TestTrackedSessionMemory: one connection tracks 100,000 sessions, each
// costing at most 600 bytes of live heap at the owning gateway (its replica
// record, indexes and the tracked-session index; the connection's read
// buffers and the requests' garbage are not kept). Run alone, as
// `go test -run TestTrackedSessionMemory -v ./node`, it logs the bytes per
// tracked session.
func TestTrackedSessionMemory(t *testing.T) {
	if testing.Short() || testkit.RaceEnabled {
		t.Skip("100,000 sessions: not under -short or -race")
	}
	const sessions = 100_000
	n := newTestNode(t, func(c *Config) { c.Timeout = time.Hour; c.TrackRate = -1; c.EventCoalesce = -1 })
	be, _ := connect(t, n, "backend", "b1")
	be.call(map[string]any{"op": "hb"})
	before := liveHeap()
	trackUsers(t, be, 0, sessions)
	waitFor(t, "notifier idle", func() bool { n.mu.Lock(); defer n.mu.Unlock(); return len(n.dirty) == 0 })
	after := liveHeap()
	if n.TrackedCount() != sessions {
		t.Fatalf("tracked %d", n.TrackedCount())
	}
	per := float64(after-before) / sessions
	t.Logf("%d tracked sessions on one connection: %.0f B of live heap each (%.1f MiB)", sessions, per, float64(after-before)/(1<<20))
	if per > 600 {
		t.Fatalf("%.0f B per tracked session, want at most 600", per)
	}
	runtime.KeepAlive(be)
}

// liveHeap returns the live heap after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestDrainHoldsTrackedSessions: a draining gateway holds the sessions a
// backend tracks, as it holds its connections' sessions: the backend
// reconnects to another gateway and tracks them there, a subscriber never
// sees them offline, and the drain ends once they are all taken over.
func TestDrainHoldsTrackedSessions(t *testing.T) {
	m, ns := newMesh(t, func(c *Config) { c.DrainGrace, c.DrainTimeout = time.Minute, 2*time.Minute }, "A", "B", "C")
	a, b, c := ns[0], ns[1], ns[2]
	w, _ := connect(t, c, "watcher", "w")
	w.ok(map[string]any{"op": "sub", "users": []string{"alice"}})
	expectPresence(t, w.recv(), "alice", "")
	be, _ := connect(t, a, "backend", "b1")
	results(t, be.call(trackReq("track", ses("alice", "web"))), protocol.OpTracked)
	expectPresence(t, w.recv(), "alice", "A")

	drained := make(chan error, 1)
	go func() { drained <- a.Drain(t.Context()) }()
	be.expectError(protocol.CodeShuttingDown)
	be.expectClosed()
	be2, _ := connect(t, b, "backend", "b1")
	results(t, be2.call(trackReq("track", ses("alice", "web"))), protocol.OpTracked)
	expectPresence(t, w.recv(), "alice", "B")
	if err := <-drained; err != nil {
		t.Fatal(err)
	}
	for _, d := range m.published("A") {
		if s := d.Session; s != nil && s.User == "alice" && s.State != crdt.StateActive {
			t.Fatalf("A wrote alice %v", s.State)
		}
	}
	checkInvariants(t, a)
	checkInvariants(t, b)
}
