package node

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/rollcall/rollcall/auth"
	"github.com/rollcall/rollcall/protocol"
)

// sessionsOf returns an event's or presence's sessions[] as frames.
func sessionsOf(t *testing.T, f frame) []frame {
	t.Helper()
	raw, _ := f["sessions"].([]any)
	out := make([]frame, 0, len(raw))
	for _, s := range raw {
		m, ok := s.(map[string]any)
		if !ok {
			t.Fatalf("sessions holds %v", s)
		}
		out = append(out, frame(m))
	}
	return out
}

// jsonOf re-encodes a decoded JSON value, for comparing objects.
func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestAccountStatusText: an account's text, emoji and until reach a
// subscriber and a get, with the override; absent fields stay; "" clears.
func TestAccountStatusText(t *testing.T) {
	clock := newFakeClock()
	n := newTestNode(t, func(c *Config) { c.Clock = clock; c.Timeout = time.Hour })
	alice, _ := connect(t, n, "alice", "laptop")
	bob, _ := connect(t, n, "bob", "phone")
	bob.ok(map[string]any{"op": "sub", "users": []string{"alice"}})
	bob.expectEvent("alice") // the snapshot

	until := clock.Now().Add(30 * time.Minute)
	alice.ok(map[string]any{"op": "account", "override": "dnd", "text": "focus time — back soon", "emoji": "🎧",
		"until": until.Format(time.RFC3339)})
	ev := bob.expectEvent("alice")
	if ev.str("status") != "dnd" || ev.str("text") != "focus time — back soon" || ev.str("emoji") != "🎧" ||
		ev.str("until") != n.formatTime(until) {
		t.Fatalf("event: %v", ev)
	}
	got := alice.call(map[string]any{"op": "get", "users": []string{"alice"}})
	p := got["users"].([]any)[0].(map[string]any)
	if p["text"] != "focus time — back soon" || p["emoji"] != "🎧" || p["until"] != n.formatTime(until) {
		t.Fatalf("get: %v", got)
	}
	// Absent fields are left as they are; "" clears the text alone.
	alice.ok(map[string]any{"op": "account", "text": ""})
	ev = bob.expectEvent("alice")
	if ev.str("status") != "dnd" || ev["text"] != nil || ev.str("emoji") != "🎧" || ev.str("until") == "" {
		t.Fatalf("after clearing the text: %v", ev)
	}
	alice.ok(map[string]any{"op": "account", "override": "none", "emoji": "", "until": ""})
	ev = bob.expectEvent("alice")
	if ev.str("status") != "available" || ev["emoji"] != nil || ev["until"] != nil {
		t.Fatalf("after clearing: %v", ev)
	}
}

// TestAccountUntilLapses: at its until an override and text lapse with no
// write, and a subscriber gets the lapsed presence at once (the sweeper's
// next pass; the test's clock is not moved past the until).
func TestAccountUntilLapses(t *testing.T) {
	clock := newFakeClock()
	n := newTestNode(t, func(c *Config) { c.Clock = clock; c.Timeout = time.Hour })
	alice, _ := connect(t, n, "alice", "laptop")
	bob, _ := connect(t, n, "bob", "phone")
	bob.ok(map[string]any{"op": "sub", "users": []string{"alice"}})
	bob.expectEvent("alice")

	until := clock.Now().Add(10 * time.Minute)
	alice.ok(map[string]any{"op": "account", "override": "away", "text": "lunch", "emoji": "🍔",
		"until": until.Format(time.RFC3339Nano)})
	if ev := bob.expectEvent("alice"); ev.str("status") != "away" || ev.str("text") != "lunch" {
		t.Fatalf("event: %v", ev)
	}
	clock.Advance(10*time.Minute - time.Millisecond)
	waitSweeps(t, n)
	if p := presenceOf(n, "alice"); p.Text != "lunch" {
		t.Fatalf("lapsed early: %+v", p)
	}
	clock.Advance(time.Millisecond) // exactly the until
	ev := bob.expectEvent("alice")
	if ev.str("status") != "available" || ev["text"] != nil || ev["emoji"] != nil || ev["until"] != nil {
		t.Fatalf("lapse event: %v", ev)
	}
	if !clock.Now().Equal(until) {
		t.Fatalf("clock moved past the until")
	}
	// A read computes the lapse too, and a later write starts from the
	// lapsed account: the old override does not come back with new text.
	alice.ok(map[string]any{"op": "account", "text": "back"})
	if ev := bob.expectEvent("alice"); ev.str("status") != "available" || ev.str("text") != "back" || ev["until"] != nil {
		t.Fatalf("write after the lapse: %v", ev)
	}
}

// TestStatusLimits: over-long or malformed text, emoji, until and meta get
// bad_request with a message that says why, and change nothing.
func TestStatusLimits(t *testing.T) {
	clock := newFakeClock()
	n := newTestNode(t, func(c *Config) { c.Clock = clock; c.Timeout = time.Hour })
	alice, _ := connect(t, n, "alice", "laptop")
	bigMeta := map[string]any{"k": strings.Repeat("x", protocol.MaxMetaBytes)}
	for _, tc := range []struct {
		req  map[string]any
		says string
	}{
		{map[string]any{"op": "account", "text": strings.Repeat("é", protocol.MaxStatusTextChars+1)}, "text of 129 characters"},
		{map[string]any{"op": "account", "text": "a\nb"}, "control character"},
		{map[string]any{"op": "account", "emoji": strings.Repeat("🍔", 5)}, "emoji of 20 bytes"},
		{map[string]any{"op": "account", "until": "tomorrow"}, "RFC 3339"},
		{map[string]any{"op": "account", "override": "dnd", "until": clock.Now().Add(-time.Second).Format(time.RFC3339)}, "not in the future"},
		{map[string]any{"op": "meta", "meta": bigMeta}, "over the limit of 1024"},
		{map[string]any{"op": "meta", "meta": []int{1}}, "JSON object"},
		{map[string]any{"op": "meta"}, "missing meta"},
	} {
		f := alice.call(tc.req)
		if f.str("code") != string(protocol.CodeBadRequest) || !strings.Contains(f.str("message"), tc.says) {
			t.Fatalf("%v: want bad_request saying %q, got %v", tc.req, tc.says, f)
		}
	}
	// Exactly at the limits is fine.
	alice.ok(map[string]any{"op": "account", "text": strings.Repeat("é", protocol.MaxStatusTextChars), "emoji": strings.Repeat("🍔", 4)})
	p := presenceOf(n, "alice")
	if p.Status.String() != "available" || len([]rune(p.Text)) != protocol.MaxStatusTextChars {
		t.Fatalf("presence: %+v", p)
	}
	// A hello with over-long meta is refused; the connection stays for
	// one without.
	c := dial(t, n)
	c.send(map[string]any{"op": "hello", "user": "carol", "meta": bigMeta})
	if f := c.expectError(protocol.CodeBadRequest); !strings.Contains(f.str("message"), "meta of") {
		t.Fatalf("hello: %v", f)
	}
	c.hello("carol", "d")
}

// TestSessionMeta: meta set at hello and by meta reaches subscribers in
// sessions[], a get and a locate; {} clears it.
func TestSessionMeta(t *testing.T) {
	n := newTestNode(t, nil)
	bob, _ := connect(t, n, "bob", "phone")
	bob.ok(map[string]any{"op": "sub", "users": []string{"alice"}})
	bob.expectEvent("alice")
	alice, _ := connect(t, n, "alice", "laptop", map[string]any{"meta": map[string]any{"tab": "inbox", "typing": false}})
	ev := bob.expectEvent("alice")
	if ss := sessionsOf(t, ev); len(ss) != 1 || jsonOf(ss[0]["meta"]) != `{"tab":"inbox","typing":false}` {
		t.Fatalf("hello's meta: %v", ev)
	}
	alice.ok(map[string]any{"op": "meta", "meta": map[string]any{"tab": "drafts"}})
	ev = bob.expectEvent("alice")
	if ss := sessionsOf(t, ev); jsonOf(ss[0]["meta"]) != `{"tab":"drafts"}` {
		t.Fatalf("meta: %v", ev)
	}
	loc := bob.call(map[string]any{"op": "locate", "user": "alice"})
	if ss := sessionsOf(t, loc); len(ss) != 1 || jsonOf(ss[0]["meta"]) != `{"tab":"drafts"}` {
		t.Fatalf("locate: %v", loc)
	}
	alice.ok(map[string]any{"op": "meta", "meta": map[string]any{}})
	ev = bob.expectEvent("alice")
	if ss := sessionsOf(t, ev); ss[0]["meta"] != nil {
		t.Fatalf("cleared meta: %v", ev)
	}
}

// TestMetaRateLimited: meta requests have their own allowance per session;
// past it, rate_limited and nothing changes, and other requests still work.
func TestMetaRateLimited(t *testing.T) {
	clock := newFakeClock()
	n := newTestNode(t, func(c *Config) { c.Clock = clock; c.Timeout = time.Hour; c.MetaRate = 1; c.MetaBurst = 2 })
	alice, _ := connect(t, n, "alice", "laptop")
	alice.ok(map[string]any{"op": "meta", "meta": map[string]any{"n": 1}})
	alice.ok(map[string]any{"op": "meta", "meta": map[string]any{"n": 2}})
	f := alice.call(map[string]any{"op": "meta", "meta": map[string]any{"n": 3}})
	if f.str("code") != string(protocol.CodeRateLimited) || !strings.Contains(f.str("message"), "meta requests per second") {
		t.Fatalf("third meta: %v", f)
	}
	if p := presenceOf(n, "alice"); p.Sessions[0].Meta != `{"n":2}` {
		t.Fatalf("meta after the refusal: %+v", p)
	}
	alice.ok(map[string]any{"op": "status", "status": "away"})
	clock.Advance(time.Second)
	alice.ok(map[string]any{"op": "meta", "meta": map[string]any{"n": 3}})
}

// TestSessionInfoFromToken: the token's rollcall.info claim shows in the
// session's sessions[] entry; a refresh with other info replaces it; a
// token whose info is over the limit is refused.
func TestSessionInfoFromToken(t *testing.T) {
	n, clock := newAuthNode(t, nil)
	s := secretSigner(t)
	tok := func(user string, info string) string {
		return mint(t, s, auth.TokenSpec{User: user, Grants: &auth.GrantsClaim{Read: []string{"*"}, Info: json.RawMessage(info)}}, clock.Now())
	}
	bob, _ := connect(t, n, "bob", "phone", map[string]any{"token": tok("bob", "")})
	bob.ok(map[string]any{"op": "sub", "users": []string{"alice"}})
	bob.expectEvent("alice")
	alice, _ := connect(t, n, "alice", "laptop", map[string]any{"token": tok("alice", `{ "name": "Alice A.", "team": "eng" }`)})
	ev := bob.expectEvent("alice")
	if ss := sessionsOf(t, ev); len(ss) != 1 || jsonOf(ss[0]["info"]) != `{"name":"Alice A.","team":"eng"}` {
		t.Fatalf("info: %v", ev)
	}
	if r := alice.call(map[string]any{"op": "refresh", "token": tok("alice", `{"name":"Alice B."}`)}); r.str("op") != protocol.OpOK {
		t.Fatalf("refresh: %v", r)
	}
	ev = bob.expectEvent("alice")
	if ss := sessionsOf(t, ev); jsonOf(ss[0]["info"]) != `{"name":"Alice B."}` {
		t.Fatalf("info after refresh: %v", ev)
	}
	c := dial(t, n)
	c.send(map[string]any{"op": "hello", "user": "carol", "token": tok("carol", `{"k":"`+strings.Repeat("x", protocol.MaxInfoBytes)+`"}`)})
	if f := c.expectError(protocol.CodeAuthFailed); !strings.Contains(f.str("message"), "rollcall.info") {
		t.Fatalf("over-long info: %v", f)
	}
}

// TestLapseQueueOneEntryPerUser: however often a user rewrites its until,
// the gateway queues one lapse for it, at the latest until, and a until
// moved earlier lapses at the earlier time.
func TestLapseQueueOneEntryPerUser(t *testing.T) {
	clock := newFakeClock()
	n := newTestNode(t, func(c *Config) { c.Clock = clock; c.Timeout = time.Hour })
	alice, _ := connect(t, n, "alice", "laptop")
	bob, _ := connect(t, n, "bob", "phone")
	bob.ok(map[string]any{"op": "sub", "users": []string{"alice"}})
	bob.expectEvent("alice")
	last := clock.Now().Add(11 * time.Minute) // the until of the last write
	for i := range 50 {
		alice.ok(map[string]any{"op": "account", "text": "busy", "until": clock.Now().Add(time.Duration(60-i) * time.Minute).Format(time.RFC3339)})
	}
	n.mu.Lock()
	queued := len(n.lapses.items)
	n.mu.Unlock()
	if queued != 1 {
		t.Fatalf("%d lapses queued for one user", queued)
	}
	// bob sees the last write before the clock moves: events coalesce, and
	// a flush that came only after the lapse would compare the lapsed
	// presence with the one before the writes and emit nothing.
	for {
		ev := bob.expectEvent("alice")
		if at, err := time.Parse(time.RFC3339Nano, ev.str("until")); err == nil && at.Equal(last) {
			break
		}
	}
	clock.Advance(11 * time.Minute) // only the queued lapse can now change alice
	for {
		if ev := bob.expectEvent("alice"); ev["text"] == nil {
			break
		}
	}
}
