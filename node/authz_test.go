package node

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/rollcall/rollcall/auth"
	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/protocol"
)

// secretSigner signs HS256 tokens with testSecret.
func secretSigner(t testing.TB) *auth.Signer {
	t.Helper()
	s, err := auth.NewSecretSigner(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// mint returns a token for spec (TTL an hour unless given), issued at now.
func mint(t testing.TB, s *auth.Signer, spec auth.TokenSpec, now time.Time) string {
	t.Helper()
	if spec.TTL == 0 {
		spec.TTL = time.Hour
	}
	tok, err := s.Sign(spec, now)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// newAuthNode starts a node that checks tokens signed with testSecret, on
// a fake clock, with a session timeout long enough that no session
// expires for silence while the test moves the clock.
func newAuthNode(t *testing.T, mut func(*Config)) (*Node, *fakeClock) {
	t.Helper()
	clock := newFakeClock()
	n := newTestNode(t, func(c *Config) {
		c.Dev = false
		c.Secret = testSecret
		c.Clock = clock
		// Tests move the clock by up to an hour and a quarter. (The
		// sweep interval keeps the deadline wheel, a slot per interval
		// over Timeout, at a few MB.)
		c.Timeout = 2 * time.Hour
		c.SweepInterval = 20 * time.Millisecond
		if mut != nil {
			mut(c)
		}
	})
	return n, clock
}

// expectForbidden sends req and checks it is refused with forbidden, and
// that the connection still serves the next request.
func expectForbidden(t *testing.T, c *client, req map[string]any, says string) {
	t.Helper()
	f := c.call(req)
	if f.str("op") != protocol.OpError || f.str("code") != string(protocol.CodeForbidden) || !strings.Contains(f.str("message"), says) {
		t.Fatalf("%v: want forbidden saying %q, got %v", req, says, f)
	}
	if f := c.call(map[string]any{"op": "hb"}); f.str("op") != protocol.OpHB {
		t.Fatalf("after a forbidden %v the connection does not serve: %v", req["op"], f)
	}
}

// TestDefaultGrants: a token without the rollcall claim reads only its own
// user, joins no group and sends to nobody; each refusal is forbidden and
// the connection stays.
func TestDefaultGrants(t *testing.T) {
	n, clock := newAuthNode(t, nil)
	s := secretSigner(t)
	tok := func(user string) map[string]any {
		return map[string]any{"token": mint(t, s, auth.TokenSpec{User: user}, clock.Now())}
	}
	bob, _ := connect(t, n, "bob", "d", tok("bob"))
	alice, _ := connect(t, n, "alice", "d", tok("alice"))
	if f := alice.call(map[string]any{"op": "get", "users": []string{"alice"}}); f.str("op") != protocol.OpPresence {
		t.Fatalf("alice reading herself: %v", f)
	}
	if f := alice.call(map[string]any{"op": "locate", "user": "alice"}); f.str("op") != protocol.OpLocate {
		t.Fatalf("alice locating herself: %v", f)
	}
	alice.ok(map[string]any{"op": "sub", "users": []string{"alice"}})
	expectForbidden(t, alice, map[string]any{"op": "get", "users": []string{"alice", "bob"}}, "reading bob")
	expectForbidden(t, alice, map[string]any{"op": "locate", "user": "bob"}, "reading bob")
	expectForbidden(t, alice, map[string]any{"op": "sub", "users": []string{"bob"}}, "reading bob")
	expectForbidden(t, alice, map[string]any{"op": "group", "group": "eng"}, "reading group eng")
	expectForbidden(t, alice, map[string]any{"op": "sub", "group": "eng"}, "reading group eng")
	expectForbidden(t, alice, map[string]any{"op": "join", "group": "eng"}, "joining group eng")
	expectForbidden(t, alice, map[string]any{"op": "send", "to": "bob", "body": "hi"}, "sending to bob")
	expectForbidden(t, alice, map[string]any{"op": "send", "to": "alice", "body": "hi"}, "sending to alice")
	bob.expectQuiet(50 * time.Millisecond) // no message, no event reached bob

	// A hello with a group it may not join is refused; the connection
	// stays for a hello without it.
	c := dial(t, n)
	c.send(map[string]any{"op": "hello", "user": "carol", "token": tok("carol")["token"], "groups": []string{"eng"}, "id": 1})
	if f := c.expectError(protocol.CodeForbidden); !strings.Contains(f.str("message"), "joining group eng") {
		t.Fatalf("hello with groups: %v", f)
	}
	c.hello("carol", "d", tok("carol"))
	if g := presenceOf(n, "carol"); !g.Online {
		t.Fatal("carol did not connect after the refused hello")
	}
	if _, ok := sessionOf(n, crdt.Key{User: "alice", Device: "d"}); !ok {
		t.Fatal("alice's session is gone")
	}
	if got := n.Stats().Forbidden; got != 9 {
		t.Fatalf("forbidden %d, want 9", got)
	}
}

// TestGrantedReads: read, join and send grants allow exactly what they
// name.
func TestGrantedReads(t *testing.T) {
	n, clock := newAuthNode(t, nil)
	s := secretSigner(t)
	tok := func(user string, g *auth.GrantsClaim) map[string]any {
		return map[string]any{"token": mint(t, s, auth.TokenSpec{User: user, Grants: g}, clock.Now())}
	}
	alice, _ := connect(t, n, "alice", "d", tok("alice", &auth.GrantsClaim{
		Read: []string{"user:bob", "group:eng"},
		Join: []string{"eng"},
		Send: []string{"user:carol", "group:ops"},
	}))
	bob, _ := connect(t, n, "bob", "d", tok("bob", &auth.GrantsClaim{Join: []string{"eng"}}))
	bob.ok(map[string]any{"op": "join", "group": "eng"})
	carol, _ := connect(t, n, "carol", "d", tok("carol", nil))
	dave, _ := connect(t, n, "dave", "d", tok("dave", &auth.GrantsClaim{Join: []string{"*"}}))

	if f := alice.call(map[string]any{"op": "get", "users": []string{"bob", "alice"}}); f.str("op") != protocol.OpPresence {
		t.Fatalf("get bob: %v", f)
	}
	expectForbidden(t, alice, map[string]any{"op": "get", "users": []string{"bob", "carol", "dave"}}, "reading carol, dave")
	if f := alice.call(map[string]any{"op": "group", "group": "eng"}); f.str("op") != protocol.OpGroup || f.num("online") != 1 {
		t.Fatalf("group eng: %v", f)
	}
	expectForbidden(t, alice, map[string]any{"op": "group", "group": "ops"}, "reading group ops")
	// A group grant reads the group's view, not its members one by one.
	alice.ok(map[string]any{"op": "sub", "group": "eng"})
	if ev := alice.expectEvent("bob"); ev.str("group") != "eng" {
		t.Fatalf("group event %v", ev)
	}
	alice.ok(map[string]any{"op": "join", "group": "eng"})
	expectForbidden(t, alice, map[string]any{"op": "join", "group": "ops"}, "joining group ops")
	alice.ok(map[string]any{"op": "leave", "group": "eng"})

	if f := alice.call(map[string]any{"op": "send", "to": "carol", "body": "hi"}); f.str("op") != protocol.OpOK || f.num("delivered") != 1 {
		t.Fatalf("send carol: %v", f)
	}
	carol.expect(protocol.OpMessage)
	// dave may be messaged while he is online in ops, and only then.
	expectForbidden(t, alice, map[string]any{"op": "send", "to": "dave", "body": "hi"}, "sending to dave")
	dave.ok(map[string]any{"op": "join", "group": "ops"})
	if f := alice.call(map[string]any{"op": "send", "to": "dave", "body": "hi"}); f.str("op") != protocol.OpOK || f.num("delivered") != 1 {
		t.Fatalf("send dave in ops: %v", f)
	}
	dave.expect(protocol.OpMessage)
	dave.ok(map[string]any{"op": "leave", "group": "ops"})
	expectForbidden(t, alice, map[string]any{"op": "send", "to": "dave", "body": "hi"}, "sending to dave")
	expectForbidden(t, alice, map[string]any{"op": "send", "to": "bob", "body": "hi"}, "sending to bob")
}

// TestBackendToken: a backend token reads every user and group, and grants
// nothing else.
func TestBackendToken(t *testing.T) {
	n, clock := newAuthNode(t, nil)
	s := secretSigner(t)
	bob, _ := connect(t, n, "bob", "d", map[string]any{"token": mint(t, s, auth.TokenSpec{User: "bob", Grants: &auth.GrantsClaim{Join: []string{"eng"}}}, clock.Now())})
	bob.ok(map[string]any{"op": "join", "group": "eng"})
	svc, _ := connect(t, n, "svc", "d", map[string]any{"token": mint(t, s, auth.TokenSpec{User: "svc", Grants: &auth.GrantsClaim{Backend: true}}, clock.Now())})
	if f := svc.call(map[string]any{"op": "get", "users": []string{"bob", "carol", "x"}}); f.str("op") != protocol.OpPresence {
		t.Fatalf("get: %v", f)
	}
	if f := svc.call(map[string]any{"op": "locate", "user": "bob"}); f.str("op") != protocol.OpLocate {
		t.Fatalf("locate: %v", f)
	}
	if f := svc.call(map[string]any{"op": "group", "group": "eng"}); f.str("op") != protocol.OpGroup || f.num("online") != 1 {
		t.Fatalf("group: %v", f)
	}
	svc.ok(map[string]any{"op": "sub", "users": []string{"bob", "carol"}, "group": "eng"})
	expectForbidden(t, svc, map[string]any{"op": "join", "group": "eng"}, "joining")
	expectForbidden(t, svc, map[string]any{"op": "send", "to": "bob", "body": 1}, "sending to bob")
}

// TestDevAllowsEverything: a --dev gateway checks no grant.
func TestDevAllowsEverything(t *testing.T) {
	n := newTestNode(t, nil)
	c, _ := connect(t, n, "alice", "d", map[string]any{"groups": []string{"eng"}})
	for _, req := range []map[string]any{
		{"op": "get", "users": []string{"bob"}}, {"op": "locate", "user": "bob"}, {"op": "group", "group": "x"},
		{"op": "join", "group": "x"}, {"op": "send", "to": "bob", "body": 1}, {"op": "refresh", "token": "anything"},
	} {
		if f := c.call(req); f.str("op") == protocol.OpError {
			t.Fatalf("%v: %v", req, f)
		}
	}
	if !n.clientMayRead("", "bob") || !n.clientMayReadAll("") {
		t.Fatal("clientMayRead on --dev")
	}
}

// TestTokenExpiryEndsSession: a session whose token expires without a
// refresh ends with token_expired, written as a clean disconnect.
func TestTokenExpiryEndsSession(t *testing.T) {
	n, clock := newAuthNode(t, nil)
	s := secretSigner(t)
	bob, _ := connect(t, n, "bob", "d", map[string]any{"token": mint(t, s, auth.TokenSpec{User: "bob", Grants: &auth.GrantsClaim{Read: []string{"user:alice"}}}, clock.Now())})
	alice, w := connect(t, n, "alice", "phone", map[string]any{"token": mint(t, s, auth.TokenSpec{User: "alice", TTL: time.Minute}, clock.Now())})
	if w.str("token_expires_at") != n.formatTime(clock.Now().Add(time.Minute)) {
		t.Fatalf("welcome %v", w)
	}
	bob.ok(map[string]any{"op": "sub", "users": []string{"alice"}})
	if ev := bob.expectEvent("alice"); !ev["online"].(bool) {
		t.Fatalf("alice not online: %v", ev)
	}
	// Within the leeway past exp the session lives.
	clock.Advance(time.Minute + auth.DefaultLeeway - time.Second)
	waitSweeps(t, n)
	if f := alice.call(map[string]any{"op": "hb"}); f.str("op") != protocol.OpHB {
		t.Fatalf("hb within the leeway: %v", f)
	}
	clock.Advance(2 * time.Second)
	alice.expectError(protocol.CodeTokenExpired)
	alice.expectClosed()
	if ev := bob.expectEvent("alice"); ev["online"].(bool) {
		t.Fatalf("alice still online: %v", ev)
	}
	if rec, _ := sessionOf(n, crdt.Key{User: "alice", Device: "phone"}); rec.State != crdt.StateDisconnected {
		t.Fatalf("record %+v, want disconnected", rec)
	}
	st := n.Stats()
	if st.TokenExpired != 1 || st.Expired != 0 {
		t.Fatalf("stats: token_expired %d, expired %d", st.TokenExpired, st.Expired)
	}
	checkInvariants(t, n)
}

// TestRefresh: a refresh with a new token for the same user extends the
// session; one for another user ends it (auth_failed); one shorter-lived
// than the current token ends the session at its own exp.
func TestRefresh(t *testing.T) {
	n, clock := newAuthNode(t, nil)
	s := secretSigner(t)
	alice, _ := connect(t, n, "alice", "d", map[string]any{"token": mint(t, s, auth.TokenSpec{User: "alice", TTL: time.Minute}, clock.Now())})
	clock.Advance(50 * time.Second)
	f := alice.call(map[string]any{"op": "refresh", "token": mint(t, s, auth.TokenSpec{User: "alice", TTL: time.Hour}, clock.Now())})
	if f.str("op") != protocol.OpOK || f.str("token_expires_at") != n.formatTime(clock.Now().Add(time.Hour)) {
		t.Fatalf("refresh: %v", f)
	}
	clock.Advance(10 * time.Minute) // well past the first token's exp
	waitSweeps(t, n)
	if f := alice.call(map[string]any{"op": "hb"}); f.str("op") != protocol.OpHB {
		t.Fatalf("after the refresh: %v", f)
	}
	// A shorter-lived token: the session ends at its exp, not the longer
	// one's.
	alice.ok(map[string]any{"op": "refresh", "token": mint(t, s, auth.TokenSpec{User: "alice", TTL: time.Minute}, clock.Now())})
	clock.Advance(time.Minute + auth.DefaultLeeway + time.Second)
	alice.expectError(protocol.CodeTokenExpired)
	alice.expectClosed()

	// Another user's token: auth_failed, and the connection closes.
	bob, _ := connect(t, n, "bob", "d", map[string]any{"token": mint(t, s, auth.TokenSpec{User: "bob"}, clock.Now())})
	bob.send(map[string]any{"op": "refresh", "token": mint(t, s, auth.TokenSpec{User: "mallory", TTL: 24 * time.Hour}, clock.Now()), "id": 1})
	if f := bob.expectError(protocol.CodeAuthFailed); !strings.Contains(f.str("message"), "another user") {
		t.Fatalf("refresh as another user: %v", f)
	}
	bob.expectClosed()
	waitFor(t, "bob offline", func() bool { return !presenceOf(n, "bob").Online })
	// An invalid token is refused the same way.
	carol, _ := connect(t, n, "carol", "d", map[string]any{"token": mint(t, s, auth.TokenSpec{User: "carol"}, clock.Now())})
	carol.send(map[string]any{"op": "refresh", "token": "x.y.z", "id": 1})
	carol.expectError(protocol.CodeAuthFailed)
	carol.expectClosed()
}

// TestRefreshNarrowsGrants: the refreshed token's grants apply from then
// on, and a subscription they no longer allow is dropped.
func TestRefreshNarrowsGrants(t *testing.T) {
	n, clock := newAuthNode(t, nil)
	s := secretSigner(t)
	bob, _ := connect(t, n, "bob", "d", map[string]any{"token": mint(t, s, auth.TokenSpec{User: "bob"}, clock.Now())})
	alice, _ := connect(t, n, "alice", "d", map[string]any{"token": mint(t, s, auth.TokenSpec{User: "alice", Grants: &auth.GrantsClaim{Read: []string{"*"}}}, clock.Now())})
	alice.ok(map[string]any{"op": "sub", "users": []string{"bob"}})
	alice.expectEvent("bob")
	alice.ok(map[string]any{"op": "refresh", "token": mint(t, s, auth.TokenSpec{User: "alice"}, clock.Now())})
	expectForbidden(t, alice, map[string]any{"op": "get", "users": []string{"bob"}}, "reading bob")
	bob.ok(map[string]any{"op": "status", "status": "busy"})
	alice.expectQuiet(100 * time.Millisecond) // the subscription to bob is gone
}

// TestTokenChecksAtHello: the verifier's checks at hello, on a gateway
// with a secret (kid s1) and an EC key (kid e1), an audience and an issuer.
func TestTokenChecksAtHello(t *testing.T) {
	clock := newFakeClock()
	dir := t.TempDir()
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKIXPublicKey(&ec.PublicKey)
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der, Headers: map[string]string{"kid": "e1"}})
	secretFile := filepath.Join(dir, "secret")
	keyFile := filepath.Join(dir, "keys.pem")
	os.WriteFile(secretFile, testSecret, 0o600)
	os.WriteFile(keyFile, pubPEM, 0o600)
	v, err := auth.NewVerifier(auth.Source{SecretFile: secretFile, SecretKeyID: "s1", KeyFiles: []string{keyFile}},
		auth.Options{Audience: "rollcall", Issuer: "https://id.example"})
	if err != nil {
		t.Fatal(err)
	}
	n, _ := newAuthNode(t, func(c *Config) { c.Clock = clock; c.Secret = nil; c.TokenVerifier = v })
	now := clock.Now()
	privDER, _ := x509.MarshalPKCS8PrivateKey(ec)
	ecSigner, err := auth.ParseSigningKey(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: privDER}))
	if err != nil {
		t.Fatal(err)
	}
	otherEC, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	otherDER, _ := x509.MarshalPKCS8PrivateKey(otherEC)
	forger, _ := auth.ParseSigningKey(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: otherDER}))
	spec := func(mut func(*auth.TokenSpec)) auth.TokenSpec {
		s := auth.TokenSpec{User: "alice", KeyID: "e1", Audience: "rollcall", Issuer: "https://id.example", TTL: time.Hour}
		if mut != nil {
			mut(&s)
		}
		return s
	}
	hsKeyedWith := func(key []byte, kid string) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
			"sub": "alice", "aud": "rollcall", "iss": "https://id.example", "exp": now.Add(time.Hour).Unix(),
		})
		tok.Header["kid"] = kid
		s, _ := tok.SignedString(key)
		return s
	}
	nbf, _ := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{
		"sub": "alice", "aud": "rollcall", "iss": "https://id.example", "exp": now.Add(time.Hour).Unix(), "nbf": now.Add(time.Minute).Unix(),
	}).SignedString(ec)
	for _, tc := range []struct{ name, token, says string }{
		{"forged (another EC key under e1)", mint(t, forger, spec(nil), now), "signature is invalid"},
		{"foreign kid", mint(t, ecSigner, spec(func(s *auth.TokenSpec) { s.KeyID = "e2" }), now), `unknown key id "e2"`},
		{"HS256 keyed with the public key's PEM", hsKeyedWith(pubPEM, "e1"), "does not match"},
		{"HS256 keyed with the public key's DER", hsKeyedWith(der, "e1"), "does not match"},
		{"expired", mint(t, ecSigner, spec(nil), now.Add(-2*time.Hour)), "expired"},
		{"nbf in the future", nbf, "not valid yet"},
		{"wrong aud", mint(t, ecSigner, spec(func(s *auth.TokenSpec) { s.Audience = "other" }), now), "aud"},
		{"wrong iss", mint(t, ecSigner, spec(func(s *auth.TokenSpec) { s.Issuer = "https://evil.example" }), now), "iss"},
	} {
		c := dial(t, n)
		c.send(map[string]any{"op": "hello", "user": "alice", "token": tc.token, "id": 1})
		if f := c.expectError(protocol.CodeAuthFailed); !strings.Contains(f.str("message"), tc.says) {
			t.Errorf("%s: %v, want it to say %q", tc.name, f, tc.says)
		}
		c.expectClosed()
	}
	connect(t, n, "alice", "ec", map[string]any{"token": mint(t, ecSigner, spec(nil), now)})
	connect(t, n, "alice", "hs", map[string]any{"token": mint(t, secretSigner(t), spec(func(s *auth.TokenSpec) { s.KeyID = "s1" }), now)})
	if got := n.Stats().AuthFailed; got != 8 {
		t.Fatalf("auth failures %d", got)
	}
}

// TestKeyRotation: two keys are valid at once; once Reload has removed the
// old one, its tokens are refused at hello, while sessions opened with it
// go on (keys are checked at hello and refresh).
func TestKeyRotation(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "keys.jwks")
	jwks := func(kids ...string) {
		var parts []string
		for _, k := range kids {
			parts = append(parts, `{"kty":"oct","kid":"`+k+`","k":"`+b64(secretFor(k))+`"}`)
		}
		if err := os.WriteFile(keyFile, []byte(`{"keys":[`+strings.Join(parts, ",")+`]}`), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	jwks("2026-11", "2026-12")
	v, err := auth.NewVerifier(auth.Source{KeyFiles: []string{keyFile}}, auth.Options{})
	if err != nil {
		t.Fatal(err)
	}
	n, clock := newAuthNode(t, func(c *Config) { c.Secret = nil; c.TokenVerifier = v })
	tok := func(kid, user string) string {
		s, err := auth.NewSecretSigner(secretFor(kid))
		if err != nil {
			t.Fatal(err)
		}
		return mint(t, s, auth.TokenSpec{User: user, KeyID: kid}, clock.Now())
	}
	old, _ := connect(t, n, "alice", "old", map[string]any{"token": tok("2026-11", "alice")})
	connect(t, n, "alice", "new", map[string]any{"token": tok("2026-12", "alice")})

	jwks("2026-12")
	changed, err := n.ReloadTokenKeys()
	if err != nil || len(changed) != 1 || !strings.HasPrefix(changed[0], "removed key 2026-11") {
		t.Fatalf("reload: %q %v", changed, err)
	}
	c := dial(t, n)
	c.send(map[string]any{"op": "hello", "user": "bob", "token": tok("2026-11", "bob")})
	if f := c.expectError(protocol.CodeAuthFailed); !strings.Contains(f.str("message"), `unknown key id "2026-11"`) {
		t.Fatalf("old key after rotation: %v", f)
	}
	connect(t, n, "bob", "new", map[string]any{"token": tok("2026-12", "bob")})
	if f := old.call(map[string]any{"op": "hb"}); f.str("op") != protocol.OpHB {
		t.Fatalf("the session opened with the old key: %v", f)
	}
	// Refreshing it needs a token of a key still in force.
	old.ok(map[string]any{"op": "refresh", "token": tok("2026-12", "alice")})
}

func secretFor(kid string) []byte { return []byte(kid + strings.Repeat("-", 32)) }

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// TestClientMayRead is the client half of the HTTP API's read
// authorization.
func TestClientMayRead(t *testing.T) {
	n, clock := newAuthNode(t, nil)
	s := secretSigner(t)
	now := clock.Now()
	plain := mint(t, s, auth.TokenSpec{User: "alice"}, now)
	reader := mint(t, s, auth.TokenSpec{User: "alice", Grants: &auth.GrantsClaim{Read: []string{"user:bob"}}}, now)
	backend := mint(t, s, auth.TokenSpec{User: "svc", Grants: &auth.GrantsClaim{Backend: true}}, now)
	expired := mint(t, s, auth.TokenSpec{User: "alice", TTL: time.Minute}, now.Add(-time.Hour))
	forged := mint(t, must(auth.NewSecretSigner([]byte(strings.Repeat("k", 32)))), auth.TokenSpec{User: "alice", Grants: &auth.GrantsClaim{Backend: true}}, now)
	for _, tc := range []struct {
		token, user string
		want        bool
	}{
		{plain, "alice", true},
		{plain, "bob", false},
		{reader, "bob", true},
		{reader, "carol", false},
		{backend, "anyone", true},
		{expired, "alice", false},
		{forged, "alice", false},
		{"", "alice", false},
		{"garbage", "alice", false},
	} {
		if got := n.clientMayRead(tc.token, tc.user); got != tc.want {
			t.Errorf("clientMayRead(%.20s…, %s) = %v, want %v", tc.token, tc.user, got, tc.want)
		}
	}
	readAll := mint(t, s, auth.TokenSpec{User: "alice", Grants: &auth.GrantsClaim{Read: []string{"*"}}}, now)
	for tok, want := range map[string]bool{backend: true, readAll: true, reader: false, plain: false, forged: false, "": false} {
		if got := n.clientMayReadAll(tok); got != want {
			t.Errorf("clientMayReadAll(%.20s…) = %v, want %v", tok, got, want)
		}
	}
	if changed, err := n.ReloadTokenKeys(); changed != nil || err != nil {
		t.Errorf("reload of a secret-only node: %q %v", changed, err)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
