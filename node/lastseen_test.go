package node

import (
	"slices"
	"testing"
	"time"

	"github.com/rollcall/rollcall/auth"
	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/protocol"
)

// TestLastSeen: when a user's last session ends, subscribers and get show
// last_seen, the time it ended, while the user is offline; not while
// another session is still on; still after the ended sessions are
// collected; and not once the user is back.
func TestLastSeen(t *testing.T) {
	clock := newFakeClock()
	fc := &fakeCluster{}
	n := newTestNode(t, func(c *Config) { c.Clock = clock; c.Timeout = time.Hour; c.Cluster = fc })
	bob, _ := connect(t, n, "bob", "desk")
	bob.ok(map[string]any{"op": "sub", "users": []string{"alice"}})
	if ev := bob.expectEvent("alice"); ev["last_seen"] != nil {
		t.Fatalf("never seen, yet: %v", ev)
	}
	laptop, _ := connect(t, n, "alice", "laptop")
	bob.expectEvent("alice")
	phone, _ := connect(t, n, "alice", "phone")
	bob.expectEvent("alice")

	clock.Advance(time.Minute)
	laptop.ok(map[string]any{"op": "bye"})
	if ev := bob.expectEvent("alice"); ev["online"] != true || ev["last_seen"] != nil {
		t.Fatalf("one session left: %v", ev)
	}
	clock.Advance(time.Minute)
	end := clock.Now()
	phone.ok(map[string]any{"op": "bye"})
	ev := bob.expectEvent("alice")
	if ev["online"] != false || ev.str("last_seen") != n.formatTime(end) {
		t.Fatalf("after the last session: %v, want last_seen %s", ev, n.formatTime(end))
	}
	if _, err := time.Parse(time.RFC3339, ev.str("last_seen")); err != nil {
		t.Fatalf("last_seen is not RFC 3339: %v", err)
	}
	// Each end is published, session first, then its last seen.
	var kinds []string
	for _, d := range fc.published() {
		switch {
		case d.LastSeen != nil:
			kinds = append(kinds, "last_seen")
		case d.Session != nil && d.Session.User == "alice" && d.Session.State.Terminal():
			kinds = append(kinds, "end")
		}
	}
	if want := []string{"end", "last_seen", "end", "last_seen"}; !slices.Equal(kinds, want) {
		t.Fatalf("published %v, want %v", kinds, want)
	}

	// The tombstones go; last_seen stays.
	clock.Advance(crdt.DefaultTombstoneHorizon + time.Minute)
	n.mu.Lock()
	st := n.replica.GC(clock.Now().UnixNano())
	n.mu.Unlock()
	if st.Tombstones < 2 {
		t.Fatalf("GC: %+v", st)
	}
	got := bob.call(map[string]any{"op": "get", "users": []string{"alice"}})
	if p := got["users"].([]any)[0].(map[string]any); p["last_seen"] != n.formatTime(end) || p["online"] != false {
		t.Fatalf("get after the tombstones went: %v", got)
	}
	// Back online: no last_seen.
	connect(t, n, "alice", "phone")
	if ev := bob.expectEvent("alice"); ev["online"] != true || ev["last_seen"] != nil {
		t.Fatalf("back online: %v", ev)
	}
	checkInvariants(t, n)
}

// TestLastSeenExpiredSession: a session that goes silent is expired, and
// its expiry is the user's last seen.
func TestLastSeenExpiredSession(t *testing.T) {
	clock := newFakeClock()
	n := newTestNode(t, func(c *Config) { c.Clock = clock; c.Timeout = 2 * time.Second; c.Heartbeat = 500 * time.Millisecond })
	bob, _ := connect(t, n, "bob", "desk")
	stop := keepBeating(bob, 100*time.Millisecond)
	defer stop()
	connect(t, n, "alice", "laptop")
	clock.Advance(3 * time.Second)
	waitFor(t, "alice expired", func() bool { return !presenceOf(n, "alice").Online })
	p := presenceOf(n, "alice")
	if p.LastSeen == 0 || p.LastSeen > clock.Now().UnixNano() {
		t.Fatalf("expired: %+v", p)
	}
}

// TestLastSeenReadGrant: last_seen is part of the presence a read grant
// gives, and of nothing a session without one can read.
func TestLastSeenReadGrant(t *testing.T) {
	n, clock := newAuthNode(t, nil)
	s := secretSigner(t)
	tok := func(user string, read ...string) string {
		return mint(t, s, auth.TokenSpec{User: user, Grants: &auth.GrantsClaim{Read: read}}, clock.Now())
	}
	alice, _ := connect(t, n, "alice", "laptop", map[string]any{"token": tok("alice")})
	alice.ok(map[string]any{"op": "bye"})
	reader, _ := connect(t, n, "bob", "desk", map[string]any{"token": tok("bob", "user:alice")})
	got := reader.call(map[string]any{"op": "get", "users": []string{"alice"}})
	if p := got["users"].([]any)[0].(map[string]any); p["last_seen"] == nil {
		t.Fatalf("with the read grant: %v", got)
	}
	other, _ := connect(t, n, "carol", "desk", map[string]any{"token": tok("carol", "user:bob")})
	other.send(map[string]any{"op": "get", "users": []string{"alice"}})
	other.expectError(protocol.CodeForbidden)
	other.send(map[string]any{"op": "sub", "users": []string{"alice"}})
	other.expectError(protocol.CodeForbidden)
}

// gatedCluster is a fakeCluster whose members do not all read last-seen
// records yet.
type gatedCluster struct{ fakeCluster }

func (*gatedCluster) LastSeenReady() bool { return false }

// TestLastSeenWaitsForEveryMember: while a member of an earlier version is
// in the cluster (LastSeenReady false), an ending session writes no last
// seen: that member would refuse the messages holding it.
func TestLastSeenWaitsForEveryMember(t *testing.T) {
	gc := &gatedCluster{}
	n := newTestNode(t, func(c *Config) { c.Timeout = time.Hour; c.Cluster = gc })
	alice, _ := connect(t, n, "alice", "laptop")
	alice.ok(map[string]any{"op": "bye"})
	waitFor(t, "alice offline", func() bool { return !presenceOf(n, "alice").Online })
	for _, d := range gc.published() {
		if d.LastSeen != nil {
			t.Fatalf("published a last seen: %+v", d.LastSeen)
		}
	}
	if p := presenceOf(n, "alice"); p.LastSeen != 0 {
		t.Fatalf("presence %+v", p)
	}
}

// TestLastSeenInGroupEventsAndInvisible: a group's "member":false event
// carries the last_seen of a member whose last session ended, as the
// user's own event does; an invisible member shows others the last seen
// of her last ended session, in both, and herself none.
func TestLastSeenInGroupEventsAndInvisible(t *testing.T) {
	clock := newFakeClock()
	n := newTestNode(t, func(c *Config) { c.Clock = clock; c.Timeout = time.Hour })
	bob, _ := connect(t, n, "bob", "desk")
	bob.ok(map[string]any{"op": "sub", "users": []string{"alice"}, "group": "eng"})
	bob.expectEvent("alice") // the user's snapshot; the group has no member
	// both reads alice's event of the user and of the group, in either order.
	both := func() (user, group frame) {
		t.Helper()
		for user == nil || group == nil {
			e := bob.expectEvent("alice")
			if e.str("group") == "eng" {
				group = e
			} else {
				user = e
			}
		}
		return user, group
	}
	eng := map[string]any{"groups": []string{"eng"}}
	alice, _ := connect(t, n, "alice", "laptop", eng)
	both()

	clock.Advance(time.Minute)
	end := n.formatTime(clock.Now())
	alice.ok(map[string]any{"op": "bye"})
	u, g := both()
	if u["online"] != false || u.str("last_seen") != end || g["member"] != false || g.str("last_seen") != end {
		t.Fatalf("after the bye: %v and %v, want last_seen %s", u, g, end)
	}

	clock.Advance(time.Minute)
	alice, _ = connect(t, n, "alice", "laptop", eng)
	if u, g := both(); u["last_seen"] != nil || g["last_seen"] != nil || g["member"] != true {
		t.Fatalf("back: %v and %v", u, g)
	}
	clock.Advance(time.Minute)
	setOverride(alice, "invisible")
	u, g = both()
	expectHidden(t, u, "alice")
	expectHidden(t, g, "alice")
	if u.str("last_seen") != end || g["member"] != false || g.str("last_seen") != end {
		t.Fatalf("invisible: %v and %v, want last_seen %s", u, g, end)
	}
	if p := getOne(alice, "alice"); p["last_seen"] != nil || p["invisible"] != true {
		t.Fatalf("her own get: %v", p)
	}
	if p := getOne(bob, "alice"); p.str("last_seen") != end {
		t.Fatalf("bob's get: %v", p)
	}
}
