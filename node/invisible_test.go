package node

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/rollcall/rollcall/auth"
	"github.com/rollcall/rollcall/protocol"
)

// The invisible override (invisible.go): every reader but the user and
// backends sees an invisible user offline, in every read path; the user's
// own reads show the truth with "invisible":true. Each test has a reader
// that is told offline and the user that is told the truth.

// setOverride sets c's account override.
func setOverride(c *client, ov string) {
	c.t.Helper()
	c.ok(map[string]any{"op": "account", "override": ov})
}

// okEvent sends req, which must succeed, and returns c's next event of
// user, which may come before the reply or after it.
func okEvent(c *client, req map[string]any, user string) frame {
	c.t.Helper()
	f, events := c.callEvents(req)
	if f.str("op") != protocol.OpOK {
		c.t.Fatalf("%v: want ok, got %v", req, f)
	}
	for _, e := range events {
		if e.str("op") == protocol.OpEvent && e.str("user") == user {
			return e
		}
	}
	return c.expectEvent(user)
}

func overrideReq(ov string) map[string]any { return map[string]any{"op": "account", "override": ov} }

// getOne returns c's get of user.
func getOne(c *client, user string) frame {
	c.t.Helper()
	f := c.call(map[string]any{"op": "get", "users": []string{user}})
	us, _ := f["users"].([]any)
	if f.str("op") != protocol.OpPresence || len(us) != 1 {
		c.t.Fatalf("get %s: %v", user, f)
	}
	return frame(us[0].(map[string]any))
}

// nextEvent reads until an event, of any user.
func nextEvent(c *client) frame {
	c.t.Helper()
	for {
		if f := c.recv(); f.str("op") == protocol.OpEvent {
			return f
		}
	}
}

// expectHidden fails unless p (a presence, or an event) shows user as an
// offline user is shown: offline, no sessions, no invisible flag.
func expectHidden(t *testing.T, p frame, user string) {
	t.Helper()
	_, flagged := p["invisible"]
	if p.str("user") != user || p["online"] != false || p.str("status") != "offline" || len(sessionsOf(t, p)) != 0 || flagged {
		t.Fatalf("want %s shown offline, got %v", user, p)
	}
}

// expectTruth fails unless p shows user online with status, sessions and
// "invisible":true.
func expectTruth(t *testing.T, p frame, user, status string, sessions int) {
	t.Helper()
	if p.str("user") != user || p["online"] != true || p.str("status") != status || len(sessionsOf(t, p)) != sessions || p["invisible"] != true {
		t.Fatalf("want %s online %s with %d sessions and invisible, got %v", user, status, sessions, p)
	}
}

// expectVisible fails unless p shows user online with status and no
// invisible flag.
func expectVisible(t *testing.T, p frame, user, status string) {
	t.Helper()
	_, flagged := p["invisible"]
	if p.str("user") != user || p["online"] != true || p.str("status") != status || flagged {
		t.Fatalf("want %s online %s, got %v", user, status, p)
	}
}

func TestInvisibleGet(t *testing.T) {
	n := newTestNode(t, nil)
	alice, _ := connect(t, n, "alice", "laptop", map[string]any{"status": "away"})
	bob, _ := connect(t, n, "bob", "phone")
	expectVisible(t, getOne(bob, "alice"), "alice", "away")
	setOverride(alice, "invisible")
	expectHidden(t, getOne(bob, "alice"), "alice")
	expectTruth(t, getOne(alice, "alice"), "alice", "away", 1)
	// Another device of hers sees her too; the override is the account's.
	phone, _ := connect(t, n, "alice", "phone")
	expectTruth(t, getOne(phone, "alice"), "alice", "available", 2)
	expectHidden(t, getOne(bob, "alice"), "alice")
	setOverride(phone, "none")
	expectVisible(t, getOne(bob, "alice"), "alice", "available")
	// She still sees others as they are.
	expectVisible(t, getOne(alice, "bob"), "bob", "available")
}

func TestInvisibleSubscription(t *testing.T) {
	n := newTestNode(t, nil)
	bob, _ := connect(t, n, "bob", "phone")
	bob.ok(map[string]any{"op": "sub", "users": []string{"alice"}})
	bob.expectEvent("alice")
	alice, _ := connect(t, n, "alice", "laptop")
	expectVisible(t, bob.expectEvent("alice"), "alice", "available")
	alice.ok(map[string]any{"op": "sub", "users": []string{"alice"}})
	alice.expectEvent("alice")

	// Going invisible is going offline to bob; she sees the truth.
	mine := okEvent(alice, overrideReq("invisible"), "alice")
	expectHidden(t, bob.expectEvent("alice"), "alice")
	expectTruth(t, mine, "alice", "available", 1)
	// Changes while invisible reach her and not bob: his next event of
	// alice is her coming back.
	expectTruth(t, okEvent(alice, map[string]any{"op": "status", "status": "away"}, "alice"), "alice", "away", 1)
	connect(t, n, "alice", "phone")
	expectTruth(t, alice.expectEvent("alice"), "alice", "available", 2)
	// A subscriber that comes now gets her offline in its snapshot.
	carol, _ := connect(t, n, "carol", "desk")
	carol.ok(map[string]any{"op": "sub", "users": []string{"alice"}})
	expectHidden(t, carol.expectEvent("alice"), "alice")

	mine = okEvent(alice, overrideReq("none"), "alice")
	expectVisible(t, bob.expectEvent("alice"), "alice", "available")
	expectVisible(t, carol.expectEvent("alice"), "alice", "available")
	if e := mine; e["invisible"] != nil || e["online"] != true {
		t.Fatalf("her own event after leaving invisible: %v", e)
	}
}

func TestInvisibleGroup(t *testing.T) {
	n := newTestNode(t, nil)
	eng := map[string]any{"groups": []string{"eng"}}
	alice, _ := connect(t, n, "alice", "laptop", eng)
	connect(t, n, "bob", "phone", eng)
	carol, _ := connect(t, n, "carol", "desk", eng)
	dan, _ := connect(t, n, "dan", "desk")
	dan.ok(map[string]any{"op": "sub", "group": "eng"})
	for range 3 {
		nextEvent(dan)
	}

	setOverride(alice, "invisible")
	if e := dan.expectEvent("alice"); e["member"] != false {
		t.Fatalf("alice going invisible: %v", e)
	} else {
		expectHidden(t, e, "alice")
	}
	members := func(f frame) []string {
		var out []string
		ms, _ := f["members"].([]any)
		for _, m := range ms {
			out = append(out, frame(m.(map[string]any)).str("user"))
		}
		return out
	}
	page := func(c *client, limit int, cursor string) frame {
		req := map[string]any{"op": "group", "group": "eng", "limit": limit}
		if cursor != "" {
			req["cursor"] = cursor
		}
		return c.call(req)
	}
	if f := page(dan, 10, ""); f.num("online") != 2 || joinLines(members(f)...) != joinLines("bob", "carol") {
		t.Fatalf("dan's group: %v", f)
	}
	if f := page(dan, 0, ""); f.num("online") != 2 {
		t.Fatalf("dan's count: %v", f)
	}
	if f := page(dan, 1, ""); f.num("online") != 2 || joinLines(members(f)...) != "bob" || f.str("next") != "bob" {
		t.Fatalf("dan's first page: %v", f)
	} else if f := page(dan, 1, "bob"); joinLines(members(f)...) != "carol" || f.str("next") != "" {
		t.Fatalf("dan's second page: %v", f)
	}
	// Alice sees herself in the group, and counted.
	f := page(alice, 10, "")
	if f.num("online") != 3 || joinLines(members(f)...) != joinLines("alice", "bob", "carol") {
		t.Fatalf("alice's group: %v", f)
	}
	expectTruth(t, frame(f["members"].([]any)[0].(map[string]any)), "alice", "available", 1)
	if f := page(alice, 0, ""); f.num("online") != 3 {
		t.Fatalf("alice's count: %v", f)
	}
	// A group subscription made now has no alice in its snapshot.
	erin, _ := connect(t, n, "erin", "desk")
	if ok := erin.ok(map[string]any{"op": "sub", "group": "eng"}); ok.num("snapshot") != 2 {
		t.Fatalf("erin's sub: %v", ok)
	}
	for _, want := range []string{"bob", "carol"} {
		if e := erin.expectEvent(want); e["member"] != true {
			t.Fatalf("erin's snapshot: %v", e)
		}
	}
	// Her changes while invisible reach neither; carol's do.
	alice.ok(map[string]any{"op": "status", "status": "away"})
	alice.ok(map[string]any{"op": "join", "group": "ops"})
	carol.ok(map[string]any{"op": "status", "status": "away"})
	for _, c := range []*client{dan, erin} {
		if e := nextEvent(c); e.str("user") != "carol" {
			t.Fatalf("want carol's event, got %v", e)
		}
	}
	setOverride(alice, "none")
	for _, c := range []*client{dan, erin} {
		e := c.expectEvent("alice")
		if e["member"] != true {
			t.Fatalf("alice back: %v", e)
		}
		expectVisible(t, e, "alice", "away")
	}
}

func TestInvisibleLocate(t *testing.T) {
	n := newTestNode(t, nil)
	alice, _ := connect(t, n, "alice", "laptop")
	bob, _ := connect(t, n, "bob", "phone")
	setOverride(alice, "invisible")
	if f := bob.call(map[string]any{"op": "locate", "user": "alice"}); f.str("op") != protocol.OpLocate || len(sessionsOf(t, f)) != 0 {
		t.Fatalf("bob's locate: %v", f)
	}
	if f := alice.call(map[string]any{"op": "locate", "user": "alice"}); len(sessionsOf(t, f)) != 1 {
		t.Fatalf("alice's locate: %v", f)
	}
}

// An invisible user still sends and receives; a sender that does not see
// her is told no session got its message, as for an offline user.
func TestInvisibleSend(t *testing.T) {
	n := newTestNode(t, nil)
	alice, _ := connect(t, n, "alice", "laptop")
	bob, _ := connect(t, n, "bob", "phone")
	setOverride(alice, "invisible")
	if f := bob.ok(map[string]any{"op": "send", "to": "alice", "body": "hi"}); f.num("delivered") != 0 {
		t.Fatalf("bob's send: %v", f)
	}
	if m := alice.expect(protocol.OpMessage); m.str("from") != "bob" {
		t.Fatalf("alice got %v", m)
	}
	if f := alice.ok(map[string]any{"op": "send", "to": "bob", "body": "hey"}); f.num("delivered") != 1 {
		t.Fatalf("alice's send: %v", f)
	}
	if m := bob.expect(protocol.OpMessage); m.str("from") != "alice" {
		t.Fatalf("bob got %v", m)
	}
	if f := alice.ok(map[string]any{"op": "send", "to": "alice", "body": "note"}); f.num("delivered") != 1 {
		t.Fatalf("alice to herself: %v", f)
	}
}

// A sender whose send grant names a group only may message the group's
// online members; to it an invisible member is offline in this too. Its
// send to her gets the very reply a send to her offline gets (forbidden)
// and reaches none of her sessions; a sender whose grant names her still
// reaches her, told delivered 0; she may send to herself.
func TestInvisibleSendGroupGrant(t *testing.T) {
	n, clock := newAuthNode(t, nil)
	s := secretSigner(t)
	tok := func(user string, g *auth.GrantsClaim) map[string]any {
		return map[string]any{"token": mint(t, s, auth.TokenSpec{User: user, Grants: g}, clock.Now())}
	}
	aliceTok := tok("alice", &auth.GrantsClaim{Join: []string{"eng"}, Send: []string{"group:eng"}})
	alice, _ := connect(t, n, "alice", "laptop", aliceTok, map[string]any{"groups": []string{"eng"}})
	sam, _ := connect(t, n, "sam", "d", tok("sam", &auth.GrantsClaim{Send: []string{"group:eng"}}))
	ned, _ := connect(t, n, "ned", "d", tok("ned", &auth.GrantsClaim{Send: []string{"user:alice"}}))
	send := func(c *client, body string) frame {
		t.Helper()
		return c.call(map[string]any{"op": "send", "to": "alice", "body": body})
	}
	if f := send(sam, "visible"); f.str("op") != protocol.OpOK || f.num("delivered") != 1 {
		t.Fatalf("sam's send while she is visible: %v", f)
	}
	if m := alice.expect(protocol.OpMessage); m.str("from") != "sam" {
		t.Fatalf("alice got %v", m)
	}

	setOverride(alice, "invisible")
	hidden := send(sam, "invisible")
	if f := send(ned, "from ned"); f.str("op") != protocol.OpOK || f.num("delivered") != 0 {
		t.Fatalf("ned's send: %v", f)
	}
	// Messages to her arrive in order: ned's is the first, sam's never
	// came.
	if m := alice.expect(protocol.OpMessage); m.str("from") != "ned" {
		t.Fatalf("alice got %v, want ned's message", m)
	}
	if f := alice.call(map[string]any{"op": "send", "to": "alice", "body": "note"}); f.str("op") != protocol.OpOK || f.num("delivered") != 1 {
		t.Fatalf("alice to herself: %v", f)
	}

	alice.ok(map[string]any{"op": "bye"})
	offline := send(sam, "offline")
	if hidden.str("code") != string(protocol.CodeForbidden) || jsonOf(hidden) != jsonOf(offline) {
		t.Fatalf("sam's send to alice invisible: %v; offline: %v", hidden, offline)
	}
	// Back: the override is the account's, so she is invisible still, until
	// she leaves it; then sam reaches her again.
	alice, _ = connect(t, n, "alice", "laptop", aliceTok, map[string]any{"groups": []string{"eng"}})
	if f := send(sam, "back, invisible"); jsonOf(f) != jsonOf(offline) {
		t.Fatalf("sam's send after she is back, invisible: %v", f)
	}
	setOverride(alice, "none")
	if f := send(sam, "back"); f.str("op") != protocol.OpOK || f.num("delivered") != 1 {
		t.Fatalf("sam's send after she is back: %v", f)
	}
	if m := alice.expect(protocol.OpMessage); m.str("from") != "sam" {
		t.Fatalf("alice got %v", m)
	}
}

// With tokens: a backend token sees the truth, a read grant of everyone
// ("*") does not.
func TestInvisibleBackendSees(t *testing.T) {
	n, clock := newAuthNode(t, nil)
	s := secretSigner(t)
	tok := func(user string, g *auth.GrantsClaim) map[string]any {
		return map[string]any{"token": mint(t, s, auth.TokenSpec{User: user, Grants: g}, clock.Now())}
	}
	alice, _ := connect(t, n, "alice", "laptop", tok("alice", nil))
	reader, _ := connect(t, n, "reader", "d", tok("reader", &auth.GrantsClaim{Read: []string{"*"}}))
	svc, _ := connect(t, n, "svc", "d", tok("svc", &auth.GrantsClaim{Backend: true}))
	svc.ok(map[string]any{"op": "sub", "users": []string{"alice"}})
	svc.expectEvent("alice")
	setOverride(alice, "invisible")
	expectTruth(t, svc.expectEvent("alice"), "alice", "available", 1)
	expectTruth(t, getOne(svc, "alice"), "alice", "available", 1)
	expectHidden(t, getOne(reader, "alice"), "alice")
	expectTruth(t, getOne(alice, "alice"), "alice", "available", 1)
}

// GET /v1/presence/{user}: the user's own token, a backend token and the
// admin token see the truth; a token that may read her, and a --dev
// node's anonymous reader, see her offline.
func TestInvisibleHTTPPresence(t *testing.T) {
	n, clock := newAuthNode(t, func(c *Config) {
		c.HTTPAddr = "127.0.0.1:0"
		c.AdminToken = []byte(testAdminToken)
	})
	s := secretSigner(t)
	tokenOf := func(user string, g *auth.GrantsClaim) string {
		return mint(t, s, auth.TokenSpec{User: user, Grants: g}, clock.Now())
	}
	aliceTok := tokenOf("alice", nil)
	alice, _ := connect(t, n, "alice", "laptop", map[string]any{"token": aliceTok})
	setOverride(alice, "invisible")
	get := func(n *Node, token string) frame {
		t.Helper()
		code, _, body := httpDo(t, http.DefaultClient, "GET", "http://"+n.HTTPAddr().String()+"/v1/presence/alice", token)
		var f frame
		if code != http.StatusOK || json.Unmarshal([]byte(body), &f) != nil {
			t.Fatalf("GET: %d %s", code, body)
		}
		return f
	}
	expectHidden(t, get(n, tokenOf("bob", &auth.GrantsClaim{Read: []string{"user:alice"}})), "alice")
	expectTruth(t, get(n, aliceTok), "alice", "available", 1)
	expectTruth(t, get(n, tokenOf("svc", &auth.GrantsClaim{Backend: true})), "alice", "available", 1)
	expectTruth(t, get(n, testAdminToken), "alice", "available", 1)

	dev := uiNode(t, nil)
	a, _ := connect(t, dev, "alice", "laptop")
	setOverride(a, "invisible")
	expectHidden(t, get(dev, ""), "alice")
}

// The backend HTTP API's read routes: a token that reads everyone gets an
// invisible user offline in POST /v1/presence and neither listed nor
// counted in GET /v1/groups/{group}; a backend token and the admin token
// get the truth.
func TestInvisibleHTTPAPI(t *testing.T) {
	n, clock, base, tok := apiNode(t, nil)
	aliceTok := mint(t, secretSigner(t), auth.TokenSpec{User: "alice", Grants: &auth.GrantsClaim{Join: []string{"eng"}}}, clock.Now())
	alice, _ := connect(t, n, "alice", "laptop", map[string]any{"token": aliceTok, "groups": []string{"eng"}})
	setOverride(alice, "invisible")
	call := func(method, path, token, body string) frame {
		t.Helper()
		r := apiCall(t, method, base+path, token, body)
		if r.code != http.StatusOK {
			t.Fatalf("%s %s: %d %s", method, path, r.code, r.body)
		}
		return frame(r.json(t))
	}
	presence := func(token string) frame {
		t.Helper()
		us, _ := call("POST", "/v1/presence", token, `{"users":["alice"]}`)["users"].([]any)
		if len(us) != 1 {
			t.Fatalf("presence: %v", us)
		}
		return frame(us[0].(map[string]any))
	}
	members := func(f frame) int { ms, _ := f["members"].([]any); return len(ms) }

	expectHidden(t, presence(tok.reader), "alice")
	if f := call("GET", "/v1/groups/eng", tok.reader, ""); f.num("online") != 0 || members(f) != 0 {
		t.Fatalf("the reader's group page: %v", f)
	}
	if f := call("GET", "/v1/groups/eng?count_only=1", tok.reader, ""); f.num("online") != 0 {
		t.Fatalf("the reader's count: %v", f)
	}
	for _, token := range []string{tok.backend, testAdminToken} {
		expectTruth(t, presence(token), "alice", "available", 1)
		f := call("GET", "/v1/groups/eng", token, "")
		if f.num("online") != 1 || members(f) != 1 {
			t.Fatalf("the group page: %v", f)
		}
		expectTruth(t, frame(f["members"].([]any)[0].(map[string]any)), "alice", "available", 1)
	}
}

// GET /v1/events: a stream with a reader's token gets her offline, in its
// snapshot and as its change when she goes invisible; hers gets the truth.
func TestInvisibleEventStream(t *testing.T) {
	n, clock := newAuthNode(t, func(c *Config) { c.HTTPAddr = "127.0.0.1:0" })
	s := secretSigner(t)
	bearer := func(user string, g *auth.GrantsClaim) http.Header {
		return http.Header{"Authorization": {"Bearer " + mint(t, s, auth.TokenSpec{User: user, Grants: g}, clock.Now())}}
	}
	aliceTok := mint(t, s, auth.TokenSpec{User: "alice", Grants: &auth.GrantsClaim{Join: []string{"eng"}}}, clock.Now())
	alice, _ := connect(t, n, "alice", "laptop", map[string]any{"token": aliceTok, "groups": []string{"eng"}})
	bobs := openChanges(t, n, url.Values{"users": {"alice"}, "group": {"eng"}},
		bearer("bob", &auth.GrantsClaim{Read: []string{"user:alice", "group:eng"}}))
	bobs.expectEventOf(n, "snapshot", "alice")
	bobs.expectEventOf(n, "snapshot", "alice")
	bobs.expectReady(true)

	setOverride(alice, "invisible")
	var hidden []protocol.Event
	for range 2 { // the user's event and the group's
		e, _ := bobs.expectEventOf(n, "presence", "alice")
		hidden = append(hidden, e)
	}
	for _, e := range hidden {
		if e.Online || e.Invisible || len(e.Sessions) != 0 || (e.Group == "eng") != (e.Member != nil && !*e.Member) {
			t.Fatalf("bob's stream: %+v", e)
		}
	}
	hers := openChanges(t, n, users("alice"), http.Header{"Authorization": {"Bearer " + aliceTok}})
	if e, _ := hers.expectEventOf(n, "snapshot", "alice"); !e.Online || !e.Invisible || len(e.Sessions) != 1 {
		t.Fatalf("her snapshot: %+v", e)
	}
	hers.expectReady(true)
	// A stream opened now: no alice in the group's snapshot, alice
	// offline in the user's.
	late := openChanges(t, n, url.Values{"users": {"alice"}, "group": {"eng"}},
		bearer("carol", &auth.GrantsClaim{Read: []string{"user:alice", "group:eng"}}))
	if e, _ := late.expectEventOf(n, "snapshot", "alice"); e.Online || e.Group != "" {
		t.Fatalf("late snapshot: %+v", e)
	}
	late.expectReady(true)

	alice.ok(map[string]any{"op": "status", "status": "away"})
	if e, _ := hers.expectEventOf(n, "presence", "alice"); e.Status != "away" || !e.Invisible {
		t.Fatalf("her change: %+v", e)
	}
	setOverride(alice, "none")
	if e, _ := hers.expectEventOf(n, "presence", "alice"); e.Invisible || !e.Online {
		t.Fatalf("her change: %+v", e)
	}
	for _, st := range []*sseStream{bobs, late} {
		for range 2 {
			if e, _ := st.expectEventOf(n, "presence", "alice"); !e.Online || e.Status != "away" || e.Invisible {
				t.Fatalf("alice back: %+v", e)
			}
		}
	}
}

// The status page's feed records going invisible as going offline.
func TestInvisibleStatusPage(t *testing.T) {
	n := uiNode(t, nil)
	s := openEvents(t, n, nil)
	s.expect("snapshot", nil)
	alice, _ := connect(t, n, "alice", "laptop")
	if c := s.expectPresence("alice"); !c.Online {
		t.Fatalf("connect: %+v", c)
	}
	setOverride(alice, "invisible")
	if c := s.expectPresence("alice"); c.Online || c.Status != "offline" || c.Sessions != 0 {
		t.Fatalf("invisible: %+v", c)
	}
	alice.ok(map[string]any{"op": "status", "status": "away"})
	setOverride(alice, "none")
	if c := s.expectPresence("alice"); !c.Online || c.Status != "away" {
		t.Fatalf("back: %+v", c)
	}
}

// An override with an until lapses: at the until, readers see the user
// come online.
func TestInvisibleUntilLapses(t *testing.T) {
	clock := newFakeClock()
	n := newTestNode(t, func(c *Config) { c.Clock = clock; c.Timeout = time.Hour })
	alice, _ := connect(t, n, "alice", "laptop")
	bob, _ := connect(t, n, "bob", "phone")
	bob.ok(map[string]any{"op": "sub", "users": []string{"alice"}})
	bob.expectEvent("alice")
	alice.ok(map[string]any{"op": "account", "override": "invisible", "until": clock.Now().Add(time.Minute).Format(time.RFC3339)})
	e := bob.expectEvent("alice")
	expectHidden(t, e, "alice")
	if e.str("until") == "" {
		t.Fatalf("the until, as an offline user's: %v", e)
	}
	clock.Advance(time.Minute)
	expectVisible(t, bob.expectEvent("alice"), "alice", "available")
}

// Across three gateways: alice is invisible on A; readers on B and C see
// her offline in get, sub, group and locate; her own subscription on C
// sees the truth.
func TestInvisibleAcrossGateways(t *testing.T) {
	_, ns := newMesh(t, nil, "A", "B", "C")
	a, b, c := ns[0], ns[1], ns[2]
	alice, _ := connect(t, a, "alice", "laptop", map[string]any{"groups": []string{"eng"}})
	phone, _ := connect(t, c, "alice", "phone")
	waitFor(t, "both of alice's sessions on every gateway", func() bool {
		for _, n := range ns {
			if len(presenceOf(n, "alice").Sessions) != 2 {
				return false
			}
		}
		return true
	})
	phone.ok(map[string]any{"op": "sub", "users": []string{"alice"}})
	phone.expectEvent("alice")
	watchers := []*client{}
	for _, n := range []*Node{b, c} {
		w, _ := connect(t, n, "watcher", n.cfg.Name)
		w.ok(map[string]any{"op": "sub", "users": []string{"alice"}, "group": "eng"})
		for range 2 { // the user's snapshot event and the group's
			expectVisible(t, w.expectEvent("alice"), "alice", "available")
		}
		watchers = append(watchers, w)
	}

	setOverride(alice, "invisible")
	for _, w := range watchers {
		for range 2 { // the user's event and the group's
			expectHidden(t, w.expectEvent("alice"), "alice")
		}
		expectHidden(t, getOne(w, "alice"), "alice")
		if f := w.call(map[string]any{"op": "group", "group": "eng"}); f.num("online") != 0 {
			t.Fatalf("group: %v", f)
		}
		if f := w.call(map[string]any{"op": "locate", "user": "alice"}); len(sessionsOf(t, f)) != 0 {
			t.Fatalf("locate: %v", f)
		}
	}
	expectTruth(t, phone.expectEvent("alice"), "alice", "available", 2)
	expectTruth(t, getOne(phone, "alice"), "alice", "available", 2)
	alice.ok(map[string]any{"op": "status", "status": "away"})
	expectTruth(t, phone.expectEvent("alice"), "alice", "available", 2) // the phone speaks for her too
	phone.ok(map[string]any{"op": "account", "override": "none"})
	for _, w := range watchers {
		for range 2 {
			expectVisible(t, w.expectEvent("alice"), "alice", "available")
		}
	}
	for _, n := range ns {
		checkInvariants(t, n)
		if p := presenceOf(n, "alice"); p.Invisible || !p.Equal(p.Public()) {
			t.Fatalf("%s: %+v", n.cfg.Name, p)
		}
	}
}

// Across three gateways, send: alice is invisible, on A. A sender on B
// whose grant names her reaches her, told delivered 0; one on C whose
// grant reaches her only through her group gets the reply a send to her
// offline gets, and reaches nobody.
func TestInvisibleSendAcrossGateways(t *testing.T) {
	clock := newFakeClock()
	_, ns := newMesh(t, func(c *Config) {
		c.Dev = false
		c.Secret = testSecret
		c.Clock = clock
		c.Timeout = time.Hour
	}, "A", "B", "C")
	a, b, c := ns[0], ns[1], ns[2]
	s := secretSigner(t)
	tok := func(user string, g *auth.GrantsClaim) map[string]any {
		return map[string]any{"token": mint(t, s, auth.TokenSpec{User: user, Grants: g}, clock.Now())}
	}
	aliceTok := tok("alice", &auth.GrantsClaim{Join: []string{"eng"}})
	alice, _ := connect(t, a, "alice", "laptop", aliceTok, map[string]any{"groups": []string{"eng"}})
	ned, _ := connect(t, b, "ned", "d", tok("ned", &auth.GrantsClaim{Send: []string{"user:alice"}}))
	sam, _ := connect(t, c, "sam", "d", tok("sam", &auth.GrantsClaim{Send: []string{"group:eng"}}))
	waitFor(t, "alice online in eng on C", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.replica.GroupOnlineCount("eng") == 1
	})
	send := func(from *client, body string) frame {
		t.Helper()
		return from.call(map[string]any{"op": "send", "to": "alice", "body": body})
	}
	if f := send(sam, "visible"); f.str("op") != protocol.OpOK || f.num("delivered") != 1 {
		t.Fatalf("sam's send while she is visible: %v", f)
	}
	if m := alice.expect(protocol.OpMessage); m.str("from") != "sam" {
		t.Fatalf("alice got %v", m)
	}

	setOverride(alice, "invisible")
	waitFor(t, "alice invisible on B and C", func() bool {
		return presenceOf(b, "alice").Invisible && presenceOf(c, "alice").Invisible
	})
	hidden := send(sam, "invisible")
	if f := send(ned, "from ned"); f.str("op") != protocol.OpOK || f.num("delivered") != 0 {
		t.Fatalf("ned's send: %v", f)
	}
	if m := alice.expect(protocol.OpMessage); m.str("from") != "ned" {
		t.Fatalf("alice got %v, want ned's message", m)
	}
	alice.ok(map[string]any{"op": "bye"})
	waitFor(t, "alice offline on C", func() bool { return !presenceOf(c, "alice").Online })
	if offline := send(sam, "offline"); hidden.str("code") != string(protocol.CodeForbidden) || jsonOf(hidden) != jsonOf(offline) {
		t.Fatalf("sam's send to alice invisible: %v; offline: %v", hidden, offline)
	}
	for _, n := range ns {
		checkInvariants(t, n)
	}
}

// Across three gateways, an invisible override with an until set on A
// lapses on B and C by their own clocks, each with an event: their
// subscribers see alice offline until it, and online at it.
func TestInvisibleUntilLapsesAcrossGateways(t *testing.T) {
	clocks := map[string]*fakeClock{}
	_, ns := newMesh(t, func(c *Config) {
		clock := newFakeClock()
		clocks[c.Name] = clock
		c.Clock = clock
		c.Timeout = time.Hour
	}, "A", "B", "C")
	alice, _ := connect(t, ns[0], "alice", "laptop")
	var watchers []*client
	for _, n := range ns[1:] {
		waitFor(t, "alice online on "+n.cfg.Name, func() bool { return presenceOf(n, "alice").Online })
		w, _ := connect(t, n, "watcher", n.cfg.Name)
		w.ok(map[string]any{"op": "sub", "users": []string{"alice"}})
		expectVisible(t, w.expectEvent("alice"), "alice", "available")
		watchers = append(watchers, w)
	}
	until := clocks["A"].Now().Add(time.Minute)
	alice.ok(map[string]any{"op": "account", "override": "invisible", "until": until.Format(time.RFC3339Nano)})
	for _, w := range watchers {
		expectHidden(t, w.expectEvent("alice"), "alice")
	}
	for _, n := range ns[1:] {
		clocks[n.cfg.Name].Advance(time.Minute - time.Millisecond)
		waitSweeps(t, n)
		if p := presenceOf(n, "alice"); !p.Invisible {
			t.Fatalf("%s: lapsed early: %+v", n.cfg.Name, p)
		}
		clocks[n.cfg.Name].Advance(time.Millisecond) // exactly the until
	}
	for _, w := range watchers {
		expectVisible(t, w.expectEvent("alice"), "alice", "available")
	}
}
