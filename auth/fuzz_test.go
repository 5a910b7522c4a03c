package auth

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
)

// FuzzParseKeyFile parses arbitrary key files (what an operator points
// --token-keys at, PEM or JWKS): errors, never panics; every key accepted
// is usable (a known alg, a valid kid) and a set of them is refused only
// for a duplicate kid. Seed corpus: testdata/fuzz/FuzzParseKeyFile.
func FuzzParseKeyFile(f *testing.F) {
	k := keys(f)
	for _, s := range [][]byte{
		publicPEM(f, &k.rsa.PublicKey, ""), publicPEM(f, &k.ec.PublicKey, "e1"), publicPEM(f, k.ed.Public(), ""),
		privatePEM(f, k.ed),
		must(json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &k.ec.PublicKey, KeyID: "e"}, {Key: testSecret, KeyID: "s"}}})),
		[]byte(`{"keys":[{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}]}`),
		[]byte(`{"keys":[{"kty":"RSA","n":"AQAB","e":"AQAB"}]}`),
		[]byte(`{"keys":[{"kty":"oct","k":"","kid":"x"}]}`), []byte(`{"keys":null}`), []byte("{"), []byte(""),
		[]byte("-----BEGIN PUBLIC KEY-----\nkid: x\n\nAAAA\n-----END PUBLIC KEY-----\n"),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := ParseKeyFile(data, "f")
		if err != nil {
			if !strings.Contains(err.Error(), "f") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		if len(got) == 0 {
			t.Fatal("no keys and no error")
		}
		kids := map[string]bool{}
		dup := false
		for _, key := range got {
			if checkKeyID(key.ID) != nil || key.material == nil {
				t.Fatalf("unusable key %v", key)
			}
			if key.ID == "" && key.Alg != AlgHS256 {
				t.Fatalf("a public key without a kid: %v", key)
			}
			dup = dup || (key.ID != "" && kids[key.ID])
			kids[key.ID] = true
		}
		if _, err := NewKeySet(got...); (err != nil) != dup && len(got) <= MaxKeys {
			t.Fatalf("key set of %v: %v", got, err)
		}
	})
}

// FuzzVerifyClaims feeds tokens with arbitrary headers and payloads, signed
// with the test secret, to the verifier: errors, never panics; a token it
// accepts has a user, an expiry, and grants whose claim parses again to the
// same grants. Seed corpus: testdata/fuzz/FuzzVerifyClaims.
func FuzzVerifyClaims(f *testing.F) {
	for _, s := range []struct{ header, payload string }{
		{`{"alg":"HS256"}`, `{"sub":"alice","exp":1790000000}`},
		{`{"alg":"HS256","kid":"s1"}`, `{"sub":"alice","exp":1790000000,"rollcall":{"read":["user:bob","group:eng","*"],"join":["eng"],"send":["*"],"backend":true}}`},
		{`{"alg":"HS256"}`, `{"sub":"alice","exp":1790000000,"rollcall":{"read":"user:bob"}}`},
		{`{"alg":"HS256"}`, `{"sub":"alice","exp":"soon","nbf":1,"iat":2}`},
		{`{"alg":"none"}`, `{"sub":"alice","exp":1790000000}`},
		{`{"alg":"HS256","kid":7}`, `{"sub":"alice","exp":1790000000}`},
		{`{"alg":"HS256"}`, `{"sub":"alice","exp":1790000000,"aud":["a","rollcall"],"iss":"x"}`},
		{`{}`, `[]`},
	} {
		f.Add(s.header, s.payload)
	}
	ks := must(NewKeySet(must(NewSecretKey(testSecret, "s1"))))
	v := NewStaticVerifier(ks, Options{})
	now := time.Unix(1780000000, 0)
	f.Fuzz(func(t *testing.T, header, payload string) {
		enc := base64.RawURLEncoding
		signing := enc.EncodeToString([]byte(header)) + "." + enc.EncodeToString([]byte(payload))
		sig, err := jwtSign(signing)
		if err != nil {
			t.Fatal(err)
		}
		id, err := v.Verify(signing+"."+sig, now)
		if err != nil {
			return
		}
		if id.User == "" || id.Expires.IsZero() || id.ValidUntil.Before(now) || id.Grants == nil {
			t.Fatalf("accepted %s.%s as %+v", header, payload, id)
		}
		again, err := ParseGrants(id.Grants.Claim())
		if err != nil || !sameClaims(again.Claim(), id.Grants.Claim()) {
			t.Fatalf("grants do not round-trip: %+v %v", id.Grants.Claim(), err)
		}
	})
}

func sameClaims(a, b *GrantsClaim) bool {
	return strings.Join(a.Read, "\n") == strings.Join(b.Read, "\n") && strings.Join(a.Join, "\n") == strings.Join(b.Join, "\n") &&
		strings.Join(a.Send, "\n") == strings.Join(b.Send, "\n") && a.Backend == b.Backend
}
