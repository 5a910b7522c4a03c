package auth

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// verifierWith returns a verifier over the test keys: the secret (kid
// "s1"), the RSA key ("r1"), the EC key ("e1") and the Ed25519 key
// (its thumbprint).
func verifierWith(t *testing.T, opts Options) *Verifier {
	t.Helper()
	k := keys(t)
	dir := t.TempDir()
	src := Source{
		SecretFile:  writeFile(t, dir, "secret", append(testSecret, '\n')),
		SecretKeyID: "s1",
		KeyFiles: []string{
			writeFile(t, dir, "rsa.pem", publicPEM(t, &k.rsa.PublicKey, "r1")),
			writeFile(t, dir, "keys.pem", append(publicPEM(t, &k.ec.PublicKey, "e1"), publicPEM(t, k.ed.Public(), "")...)),
		},
	}
	v, err := NewVerifier(src, opts)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestVerifyAcceptsEveryAlg(t *testing.T) {
	k := keys(t)
	v := verifierWith(t, DefaultOptions())
	secret, _ := NewSecretSigner(testSecret)
	edKID, _ := Thumbprint(k.ed.Public())
	for _, tc := range []struct {
		name   string
		s      *Signer
		kid    string
		wantID string
	}{
		{"HS256 with kid", secret, "s1", "s1"},
		{"HS256 without kid (the only HS256 key)", secret, "", ""},
		{"RS256", signer(t, k.rsa), "r1", "r1"},
		{"ES256", signer(t, k.ec), "e1", "e1"},
		{"EdDSA, kid the thumbprint by default", signer(t, k.ed), "", edKID},
	} {
		tok := mustSign(t, tc.s, TokenSpec{User: "alice", KeyID: tc.kid}, testNow)
		id, err := v.Verify(tok, testNow.Add(time.Minute))
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if id.User != "alice" || id.KeyID != tc.wantID || !id.Expires.Equal(testNow.Add(time.Hour)) ||
			!id.ValidUntil.Equal(testNow.Add(time.Hour+DefaultLeeway)) {
			t.Errorf("%s: identity %+v", tc.name, id)
		}
	}
}

// TestVerifyRefuses is every token the verifier must refuse, each for its
// own check.
func TestVerifyRefuses(t *testing.T) {
	k := keys(t)
	v := verifierWith(t, Options{Audience: "rollcall", Issuer: "https://id.example"})
	spec := func(mut func(*TokenSpec)) TokenSpec {
		s := TokenSpec{User: "alice", Audience: "rollcall", Issuer: "https://id.example", TTL: time.Hour}
		if mut != nil {
			mut(&s)
		}
		return s
	}
	rs := signer(t, k.rsa)
	good := mustSign(t, rs, spec(func(s *TokenSpec) { s.KeyID = "r1" }), testNow)
	if _, err := v.Verify(good, testNow); err != nil {
		t.Fatalf("the good token: %v", err)
	}
	otherRSA, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	otherSecret, _ := NewSecretSigner([]byte(strings.Repeat("k", 32)))
	// The public key's bytes as an HMAC secret: the classic alg confusion.
	pubDER, _ := x509.MarshalPKIXPublicKey(&k.rsa.PublicKey)
	pubPEM := publicPEM(t, &k.rsa.PublicKey, "r1")
	hsWith := func(key []byte, kid string) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
			"sub": "alice", "aud": "rollcall", "iss": "https://id.example", "exp": testNow.Add(time.Hour).Unix(),
		})
		if kid != "" {
			tok.Header["kid"] = kid
		}
		s, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	none, _ := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims{
		"sub": "alice", "aud": "rollcall", "iss": "https://id.example", "exp": testNow.Add(time.Hour).Unix(),
	}).SignedString(jwt.UnsafeAllowNoneSignatureType)
	hs512, _ := jwt.NewWithClaims(jwt.SigningMethodHS512, jwt.MapClaims{
		"sub": "alice", "aud": "rollcall", "iss": "https://id.example", "exp": testNow.Add(time.Hour).Unix(),
	}).SignedString(testSecret)
	noExp, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": "alice", "aud": "rollcall", "iss": "https://id.example",
	}).SignedString(testSecret)
	noSub, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"aud": "rollcall", "iss": "https://id.example", "exp": testNow.Add(time.Hour).Unix(),
	}).SignedString(testSecret)
	nbf := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": "alice", "aud": "rollcall", "iss": "https://id.example", "exp": testNow.Add(time.Hour).Unix(),
		"nbf": testNow.Add(time.Minute).Unix(),
	})
	nbfTok, _ := nbf.SignedString(testSecret)
	iat := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": "alice", "aud": "rollcall", "iss": "https://id.example", "exp": testNow.Add(time.Hour).Unix(),
		"iat": testNow.Add(time.Minute).Unix(),
	})
	iatTok, _ := iat.SignedString(testSecret)
	badGrant, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": "alice", "aud": "rollcall", "iss": "https://id.example", "exp": testNow.Add(time.Hour).Unix(),
		"rollcall": map[string]any{"read": []string{"bob"}},
	}).SignedString(testSecret)
	kidNumber := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": "alice", "aud": "rollcall", "iss": "https://id.example", "exp": testNow.Add(time.Hour).Unix(),
	})
	kidNumber.Header["kid"] = 7
	kidNumberTok, _ := kidNumber.SignedString(testSecret)

	for _, tc := range []struct {
		name, token string
		at          time.Time
		want        error // nil: any error
		msg         string
	}{
		{"forged: signed by another EC key under e1", mustSign(t, signer(t, otherRSA), spec(func(s *TokenSpec) { s.KeyID = "e1" }), testNow), testNow, jwt.ErrTokenSignatureInvalid, ""},
		{"forged: another secret, no kid", mustSign(t, otherSecret, spec(nil), testNow), testNow, jwt.ErrTokenSignatureInvalid, ""},
		{"forged: another secret under s1", mustSign(t, otherSecret, spec(func(s *TokenSpec) { s.KeyID = "s1" }), testNow), testNow, jwt.ErrTokenSignatureInvalid, ""},
		{"tampered", good[:len(good)-4] + "AAAA", testNow, jwt.ErrTokenSignatureInvalid, ""},
		{"foreign kid", mustSign(t, rs, spec(func(s *TokenSpec) { s.KeyID = "stranger" }), testNow), testNow, ErrUnknownKeyID, `unknown key id "stranger"`},
		{"kid not a string", kidNumberTok, testNow, nil, "kid is not a string"},
		{"alg none", none, testNow, jwt.ErrTokenSignatureInvalid, ""},
		{"HS512 (not accepted)", hs512, testNow, jwt.ErrTokenSignatureInvalid, ""},
		{"HS256 keyed with the RSA key's PEM, its kid", hsWith(pubPEM, "r1"), testNow, ErrAlgMismatch, "the token says HS256, key \"r1\" is RS256"},
		{"HS256 keyed with the RSA key's DER, its kid", hsWith(pubDER, "r1"), testNow, ErrAlgMismatch, ""},
		{"HS256 keyed with the RSA key's PEM, no kid", hsWith(pubPEM, ""), testNow, jwt.ErrTokenSignatureInvalid, ""},
		{"expired (past the leeway)", good, testNow.Add(time.Hour + DefaultLeeway + time.Second), jwt.ErrTokenExpired, ""},
		{"no exp", noExp, testNow, jwt.ErrTokenRequiredClaimMissing, ""},
		{"no sub", noSub, testNow, nil, "no sub"},
		{"nbf in the future", nbfTok, testNow, jwt.ErrTokenNotValidYet, ""},
		{"iat in the future", iatTok, testNow, jwt.ErrTokenUsedBeforeIssued, ""},
		{"wrong aud", mustSign(t, rs, spec(func(s *TokenSpec) { s.KeyID = "r1"; s.Audience = "other" }), testNow), testNow, jwt.ErrTokenInvalidAudience, ""},
		{"no aud", mustSign(t, rs, spec(func(s *TokenSpec) { s.KeyID = "r1"; s.Audience = "" }), testNow), testNow, jwt.ErrTokenRequiredClaimMissing, ""},
		{"wrong iss", mustSign(t, rs, spec(func(s *TokenSpec) { s.KeyID = "r1"; s.Issuer = "https://evil.example" }), testNow), testNow, jwt.ErrTokenInvalidIssuer, ""},
		{"malformed grant", badGrant, testNow, nil, `rollcall.read entry "bob"`},
		{"garbage", "not.a.jwt", testNow, jwt.ErrTokenMalformed, ""},
		{"empty", "", testNow, nil, "missing token"},
	} {
		_, err := v.Verify(tc.token, tc.at)
		switch {
		case err == nil:
			t.Errorf("%s: accepted", tc.name)
		case tc.want != nil && !errors.Is(err, tc.want):
			t.Errorf("%s: error %v, want %v", tc.name, err, tc.want)
		case tc.msg != "" && !strings.Contains(err.Error(), tc.msg):
			t.Errorf("%s: error %q does not say %q", tc.name, err, tc.msg)
		}
	}
}

func TestVerifyLeeway(t *testing.T) {
	s, _ := NewSecretSigner(testSecret)
	ks, _ := NewKeySet(must(NewSecretKey(testSecret, "")))
	tok := mustSign(t, s, TokenSpec{User: "alice", TTL: time.Minute}, testNow)
	exp := testNow.Add(time.Minute)
	for _, tc := range []struct {
		leeway time.Duration
		at     time.Time
		ok     bool
	}{
		{DefaultOptions().Leeway, exp.Add(DefaultLeeway - time.Second), true}, // the default, 5s
		{DefaultOptions().Leeway, exp.Add(DefaultLeeway + time.Second), false},
		{time.Minute, exp.Add(59 * time.Second), true},
		{0, exp.Add(time.Second), false}, // zero: none
		{0, exp.Add(-time.Second), true},
		{-1, exp.Add(time.Second), false}, // negative: none too
	} {
		v := NewStaticVerifier(ks, Options{Leeway: tc.leeway})
		_, err := v.Verify(tok, tc.at)
		if (err == nil) != tc.ok {
			t.Errorf("leeway %v at exp%+v: %v", tc.leeway, tc.at.Sub(exp), err)
		}
	}
	// A token issued a little in the future (the minting clock runs ahead)
	// is accepted within the leeway.
	ahead := mustSign(t, s, TokenSpec{User: "alice"}, testNow.Add(3*time.Second))
	if _, err := NewStaticVerifier(ks, DefaultOptions()).Verify(ahead, testNow); err != nil {
		t.Errorf("iat 3s ahead: %v", err)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestKidlessTokenNeedsOneKeyOfItsAlg: a token without a kid is verified
// only when its alg has exactly one key.
func TestKidlessTokenNeedsOneKeyOfItsAlg(t *testing.T) {
	s, _ := NewSecretSigner(testSecret)
	tok := mustSign(t, s, TokenSpec{User: "alice"}, testNow)
	one, _ := NewKeySet(must(NewSecretKey(testSecret, "a")))
	if _, err := NewStaticVerifier(one, Options{}).Verify(tok, testNow); err != nil {
		t.Fatalf("one HS256 key: %v", err)
	}
	two, _ := NewKeySet(must(NewSecretKey(testSecret, "a")), must(NewSecretKey([]byte(strings.Repeat("z", 32)), "b")))
	if _, err := NewStaticVerifier(two, Options{}).Verify(tok, testNow); !errors.Is(err, ErrAmbiguousKey) {
		t.Fatalf("two HS256 keys: %v", err)
	}
	withKID := mustSign(t, s, TokenSpec{User: "alice", KeyID: "a"}, testNow)
	if _, err := NewStaticVerifier(two, Options{}).Verify(withKID, testNow); err != nil {
		t.Fatalf("kid a among two: %v", err)
	}
	k := keys(t)
	rsaOnly, _ := NewKeySet(must(publicKey(&k.rsa.PublicKey, "r", "")))
	if _, err := NewStaticVerifier(rsaOnly, Options{}).Verify(tok, testNow); !errors.Is(err, ErrNoKey) {
		t.Fatalf("HS256 token, RSA key only: %v", err)
	}
}

// TestReloadRotation: two keys valid at once, then the old one removed by
// Reload; a failed reload keeps the keys in force.
func TestReloadRotation(t *testing.T) {
	k := keys(t)
	dir := t.TempDir()
	oldFile := writeFile(t, dir, "old.pem", publicPEM(t, &k.ec.PublicKey, "2026-11"))
	newFile := writeFile(t, dir, "new.pem", publicPEM(t, k.ed.Public(), "2026-12"))
	list := writeFile(t, dir, "keys.pem", append(must(os.ReadFile(oldFile)), must(os.ReadFile(newFile))...))
	v, err := NewVerifier(Source{KeyFiles: []string{list}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	oldTok := mustSign(t, signer(t, k.ec), TokenSpec{User: "alice", KeyID: "2026-11"}, testNow)
	newTok := mustSign(t, signer(t, k.ed), TokenSpec{User: "alice", KeyID: "2026-12"}, testNow)
	for _, tok := range []string{oldTok, newTok} {
		if _, err := v.Verify(tok, testNow); err != nil {
			t.Fatalf("during rotation: %v", err)
		}
	}
	if changed, err := v.Reload(); err != nil || len(changed) != 0 {
		t.Fatalf("reload of unchanged files: %q %v", changed, err)
	}
	writeFile(t, dir, "keys.pem", must(os.ReadFile(newFile)))
	changed, err := v.Reload()
	if err != nil || len(changed) != 1 || !strings.HasPrefix(changed[0], "removed key 2026-11 ES256") {
		t.Fatalf("reload: %q %v", changed, err)
	}
	if _, err := v.Verify(oldTok, testNow); !errors.Is(err, ErrUnknownKeyID) {
		t.Fatalf("old key after its removal: %v", err)
	}
	if _, err := v.Verify(newTok, testNow); err != nil {
		t.Fatalf("new key: %v", err)
	}
	// A broken file: the reload fails, the new key stays in force.
	writeFile(t, dir, "keys.pem", []byte("-----BEGIN PUBLIC KEY-----\nnot base64\n-----END PUBLIC KEY-----\n"))
	if changed, err := v.Reload(); err == nil || !strings.Contains(err.Error(), "old keys stay") || changed != nil {
		t.Fatalf("broken reload: %q %v", changed, err)
	}
	if _, err := v.Verify(newTok, testNow); err != nil {
		t.Fatalf("after a failed reload: %v", err)
	}
	// The same kid with another key is reported as replaced.
	writeFile(t, dir, "keys.pem", publicPEM(t, &k.rsa.PublicKey, "2026-12"))
	if changed, err := v.Reload(); err != nil || len(changed) != 1 || !strings.HasPrefix(changed[0], "replaced key 2026-12 RS256") {
		t.Fatalf("replaced: %q %v", changed, err)
	}
	if _, err := v.Verify(newTok, testNow); !errors.Is(err, ErrAlgMismatch) {
		t.Fatalf("EdDSA token under what is now an RSA key: %v", err)
	}
}

func TestStaticVerifierReload(t *testing.T) {
	ks, _ := NewKeySet(must(NewSecretKey(testSecret, "")))
	if changed, err := NewStaticVerifier(ks, Options{}).Reload(); err != nil || changed != nil {
		t.Fatal(changed, err)
	}
	if _, err := NewVerifier(Source{}, Options{}); err == nil {
		t.Fatal("a verifier without keys")
	}
}

func TestSignRefuses(t *testing.T) {
	s, _ := NewSecretSigner(testSecret)
	for _, spec := range []TokenSpec{
		{User: "", TTL: time.Hour},
		{User: "a", TTL: 0},
		{User: "a", TTL: time.Hour, Grants: &GrantsClaim{Send: []string{"bob"}}},
		{User: "a", TTL: time.Hour, KeyID: "bad\nkid"},
	} {
		if _, err := s.Sign(spec, testNow); err == nil {
			t.Errorf("signed %+v", spec)
		}
	}
	if _, err := NewSecretSigner([]byte("short")); err == nil {
		t.Error("short secret")
	}
	if _, err := ParseSigningKey(publicPEM(t, ed25519.PublicKey(make([]byte, 32)), "")); err == nil {
		t.Error("a public key as signing key")
	}
}

// BenchmarkVerify is the cost of one token check (a hello or a refresh)
// per algorithm.
func BenchmarkVerify(b *testing.B) {
	k := keys(b)
	secret, _ := NewSecretSigner(testSecret)
	ks := must(NewKeySet(
		must(NewSecretKey(testSecret, "s")),
		must(publicKey(&k.rsa.PublicKey, "r", "")),
		must(publicKey(&k.ec.PublicKey, "e", "")),
		must(publicKey(k.ed.Public(), "d", "")),
	))
	v := NewStaticVerifier(ks, Options{})
	for _, tc := range []struct {
		alg string
		s   *Signer
		kid string
	}{{AlgHS256, secret, "s"}, {AlgRS256, signer(b, k.rsa), "r"}, {AlgES256, signer(b, k.ec), "e"}, {AlgEdDSA, signer(b, k.ed), "d"}} {
		tok := mustSign(b, tc.s, TokenSpec{User: "alice", KeyID: tc.kid, Grants: &GrantsClaim{Read: []string{"user:bob", "group:eng"}, Send: []string{"*"}}}, testNow)
		b.Run(tc.alg, func(b *testing.B) {
			for b.Loop() {
				if _, err := v.Verify(tok, testNow); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
