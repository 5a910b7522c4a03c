package node

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rollcall/rollcall/protocol"
)

// helloCycles makes attempts hellos of user with a new device name each,
// closing each connection a welcome opened and retrying on the same one
// after a refusal, and returns how many were welcomed and the refusals'
// messages.
func helloCycles(t testing.TB, n *Node, user string, attempts int) (welcomed int, refusals []string) {
	t.Helper()
	c := dial(t, n)
	for i := range attempts {
		c.send(map[string]any{"op": "hello", "user": user, "device": fmt.Sprintf("d%05d", i)})
		f := c.recv()
		switch {
		case f.str("op") == protocol.OpWelcome:
			welcomed++
			c.nc.Close()
			c = dial(t, n)
		case f.str("code") == string(protocol.CodeRateLimited):
			refusals = append(refusals, f.str("message"))
		default:
			t.Fatalf("hello %d: %v", i, f)
		}
	}
	c.nc.Close()
	return welcomed, refusals
}

// TestHelloRateLimitedPerUser: a user cycling hello and close with new
// device names gets rate_limited past UserHelloBurst (time standing
// still), the connection stays usable, another user is not held back,
// and once time passes the user may connect again.
func TestHelloRateLimitedPerUser(t *testing.T) {
	clock := newFakeClock()
	n := newTestNode(t, func(c *Config) {
		c.Clock = clock
		c.RequestRate = -1 // the retries on one connection are what is measured
		c.IPHelloRate = -1 // the user's limit is under test; every hello comes from 127.0.0.1
		c.Timeout = time.Hour
	})
	attempts := 6000
	if testing.Short() {
		attempts = 600
	}
	welcomed, refusals := helloCycles(t, n, "alice", attempts)
	if welcomed != DefaultUserHelloBurst || len(refusals) != attempts-DefaultUserHelloBurst {
		t.Fatalf("%d welcomed, %d refused; want %d and %d", welcomed, len(refusals), DefaultUserHelloBurst, attempts-DefaultUserHelloBurst)
	}
	if !strings.Contains(refusals[0], "hellos per second") || !strings.Contains(refusals[0], "for user alice") {
		t.Fatalf("refusal: %q", refusals[0])
	}
	connect(t, n, "bob", "phone")
	clock.Advance(time.Second / DefaultUserHelloRate)
	connect(t, n, "alice", "phone")
	if m := n.Metrics(); m.RequestErrors[OpCode{Op: protocol.OpHello, Code: string(protocol.CodeRateLimited)}] != uint64(len(refusals)) {
		t.Fatalf("hello rate_limited errors counted: %v", m.RequestErrors)
	}
}

// TestHelloRateLimitedPerAddress: past IPHelloBurst hellos from one
// address, every user's hello from it gets rate_limited, before its token
// is looked at.
func TestHelloRateLimitedPerAddress(t *testing.T) {
	n := newTestNode(t, func(c *Config) {
		c.Clock = newFakeClock()
		c.IPHelloBurst = 5
		c.IPHelloRate = 1
	})
	for i := range 5 {
		connect(t, n, fmt.Sprintf("u%d", i), "phone")
	}
	c := dial(t, n)
	c.send(map[string]any{"op": "hello", "user": "zed", "token": "not even a token"})
	if f := c.expectError(protocol.CodeRateLimited); !strings.Contains(f.str("message"), "from one address") {
		t.Fatalf("refusal: %v", f)
	}
}

// TestGetCollapsesRepeatedUsers: a get naming one user a thousand times
// (who holds many tombstones) is answered with one entry; distinct users
// keep their request order.
func TestGetCollapsesRepeatedUsers(t *testing.T) {
	n := newTestNode(t, func(c *Config) { c.Clock = newFakeClock(); c.RequestRate = -1; c.Timeout = time.Hour })
	helloCycles(t, n, "alice", 50)
	c, _ := connect(t, n, "watcher", "desk")
	users := make([]string, protocol.MaxUsersPerRequest)
	for i := range users {
		users[i] = "alice"
	}
	users[1], users[500] = "bob", "watcher"
	f := c.call(map[string]any{"op": "get", "users": users})
	got, _ := f["users"].([]any)
	var names []string
	for _, p := range got {
		names = append(names, frame(p.(map[string]any)).str("user"))
	}
	if strings.Join(names, ",") != "alice,bob,watcher" {
		t.Fatalf("reply users %v, want alice,bob,watcher", names)
	}
}

// TestTombstonesPerUserBounded: a user's ended sessions on this gateway
// stay at MaxTombstonesPerUser, however many it churns through.
func TestTombstonesPerUserBounded(t *testing.T) {
	n := newTestNode(t, func(c *Config) {
		c.Clock = newFakeClock()
		c.RequestRate = -1
		c.Timeout = time.Hour
		c.MaxTombstonesPerUser = 10
	})
	helloCycles(t, n, "alice", 60)
	waitFor(t, "every session ended", func() bool {
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.replica.ActiveSessionCount("alice") == 0
	})
	n.mu.Lock()
	held := len(n.replica.UserSessions("alice"))
	n.mu.Unlock()
	if held != 10 {
		t.Fatalf("alice holds %d records, want 10 tombstones", held)
	}
}

// BenchmarkGetRepeatedUserAfterChurn measures a get naming one user
// protocol.MaxUsersPerRequest times after that user churned through 6,000
// sessions on new device names (the hello limits off, so the churn
// happens): its tombstones are held at MaxTombstonesPerUser, and the
// repeats collapse to one lookup.
//
//	go test -run '^$' -bench BenchmarkGetRepeatedUserAfterChurn -benchtime 200x ./node
func BenchmarkGetRepeatedUserAfterChurn(b *testing.B) {
	n := newTestNode(b, func(c *Config) {
		c.Clock = newFakeClock()
		c.RequestRate, c.UserHelloRate, c.IPHelloRate = -1, -1, -1
		c.Timeout = time.Hour
	})
	helloCycles(b, n, "alice", 6000)
	c, _ := connect(b, n, "watcher", "desk")
	users := make([]string, protocol.MaxUsersPerRequest)
	for i := range users {
		users[i] = "alice"
	}
	req := map[string]any{"op": "get", "users": users}
	for b.Loop() {
		if f := c.call(req); f.str("op") != protocol.OpPresence {
			b.Fatalf("reply %v", f)
		}
	}
}
