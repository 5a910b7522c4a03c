package node

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/rollcall/rollcall/protocol"
)

func TestTokens(t *testing.T) {
	clock := newFakeClock()
	n := newTestNode(t, func(c *Config) {
		c.Dev = false
		c.Secret = testSecret
		c.Clock = clock
		// The clock jumps two hours below, past the token's expiry; a
		// longer session timeout keeps the deadline sweeper from
		// expiring the session for silence instead.
		c.Timeout = 3 * time.Hour
	})
	now := clock.Now()
	good, err := NewToken(testSecret, "alice", time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	expired, _ := NewToken(testSecret, "alice", time.Minute, now.Add(-time.Hour))
	otherKey, _ := NewToken([]byte(strings.Repeat("k", 32)), "alice", time.Hour, now)
	noExp, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.RegisteredClaims{Subject: "alice"}).SignedString(testSecret)
	none, _ := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.RegisteredClaims{
		Subject: "alice", ExpiresAt: jwt.NewNumericDate(now.Add(time.Hour)),
	}).SignedString(jwt.UnsafeAllowNoneSignatureType)
	tampered := good[:len(good)-2] + "xx"

	for _, tc := range []struct{ name, user, token string }{
		{"missing", "alice", ""},
		{"wrong user", "bob", good},
		{"expired", "alice", expired},
		{"bad signature", "alice", otherKey},
		{"tampered", "alice", tampered},
		{"no exp", "alice", noExp},
		{"alg none", "alice", none},
		{"garbage", "alice", "not.a.jwt"},
	} {
		c := dial(t, n)
		c.send(map[string]any{"op": "hello", "user": tc.user, "token": tc.token, "id": 1})
		f := c.expectError(protocol.CodeAuthFailed)
		if f.num("id") != 1 {
			t.Errorf("%s: %v", tc.name, f)
		}
		c.expectClosed()
	}
	if n.SessionCount() != 0 {
		t.Fatal("a bad token opened a session")
	}
	c := dial(t, n)
	c.hello("alice", "phone", map[string]any{"token": good})
	if f := c.call(map[string]any{"op": "hb"}); f.str("op") != protocol.OpHB {
		t.Fatalf("hb %v", f)
	}
	// The token expires while connected: the session ends
	// (TestTokenExpiryEndsSession has the details).
	clock.Advance(2 * time.Hour)
	c.expectError(protocol.CodeTokenExpired)
	if got := n.Stats().AuthFailed; got != 8 {
		t.Fatalf("auth failures %d", got)
	}
}

func TestReadSecretFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "secret")
	os.WriteFile(p, append(testSecret, '\n'), 0o600)
	b, err := ReadSecretFile(p)
	if err != nil || string(b) != string(testSecret) {
		t.Fatalf("ReadSecretFile: %q %v", b, err)
	}
	os.WriteFile(p, []byte("short\n"), 0o600)
	if _, err := ReadSecretFile(p); err == nil {
		t.Fatal("short secret accepted")
	}
	if _, err := ReadSecretFile(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("missing file accepted")
	}
	if _, err := NewToken([]byte("short"), "a", time.Hour, time.Now()); err == nil {
		t.Fatal("short secret signed")
	}
	if _, err := NewToken(testSecret, "", time.Hour, time.Now()); err == nil {
		t.Fatal("empty user signed")
	}
}

func TestConfigValidate(t *testing.T) {
	d := DefaultConfig()
	if d.Heartbeat != 5*time.Second || d.Timeout != 15*time.Second || d.HandshakeTimeout != 10*time.Second ||
		d.MaxLineBytes != 64<<10 || d.ClientAddr != "127.0.0.1:7400" || d.Name == "" {
		t.Fatalf("defaults %+v", d)
	}
	if err := d.Validate(); err == nil {
		t.Fatal("no secret and not dev accepted")
	}
	for _, mut := range []func(*Config){
		func(c *Config) { c.Timeout = c.Heartbeat },
		func(c *Config) { c.Heartbeat = -1 },
		func(c *Config) { c.Secret = []byte("short") },
		func(c *Config) { c.OutboundQueueBytes = c.MaxLineBytes },
		func(c *Config) { c.MaxLineBytes = 10 },
		func(c *Config) { c.Name = strings.Repeat("n", 300) },
	} {
		c := DefaultConfig()
		c.Dev = true
		mut(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("invalid config accepted: %+v", c)
		}
	}
	c := DefaultConfig()
	c.Secret = testSecret
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	// A token verifier instead of a secret; both is a contradiction.
	c.TokenVerifier = tokenNode(t, testSecret, time.Now()).tokens
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "not both") {
		t.Fatalf("Secret and TokenVerifier: %v", err)
	}
	c.Secret = nil
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}
