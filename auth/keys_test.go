package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
)

func jwks(t *testing.T, ks ...jose.JSONWebKey) []byte {
	t.Helper()
	b, err := json.Marshal(jose.JSONWebKeySet{Keys: ks})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseJWKS(t *testing.T) {
	k := keys(t)
	data := jwks(t,
		jose.JSONWebKey{Key: &k.rsa.PublicKey, KeyID: "r1", Algorithm: "RS256", Use: "sig"},
		jose.JSONWebKey{Key: &k.ec.PublicKey, KeyID: "e1"},
		jose.JSONWebKey{Key: k.ed.Public()},
		jose.JSONWebKey{Key: testSecret, KeyID: "s1", Algorithm: "HS256"},
		jose.JSONWebKey{Key: &k.ec.PublicKey, KeyID: "enc", Use: "enc"},
	)
	got, err := ParseKeyFile(append([]byte("\n  "), data...), "keys.jwks")
	if err != nil {
		t.Fatal(err)
	}
	edKID, _ := Thumbprint(k.ed.Public())
	want := []string{"r1 RS256", "e1 ES256", edKID + " EdDSA", "s1 HS256"}
	if len(got) != len(want) {
		t.Fatalf("keys %v", got)
	}
	for i, key := range got {
		if !strings.HasPrefix(key.String(), want[i]) || key.Source != "keys.jwks" {
			t.Errorf("key %d: %s, want %s", i, key, want[i])
		}
	}
	// Tokens verify under the JWKS's keys.
	ks, err := NewKeySet(got...)
	if err != nil {
		t.Fatal(err)
	}
	v := NewStaticVerifier(ks, Options{})
	for _, s := range []struct {
		s   *Signer
		kid string
	}{{signer(t, k.rsa), "r1"}, {signer(t, k.ec), "e1"}, {signer(t, k.ed), ""}, {must(NewSecretSigner(testSecret)), "s1"}} {
		if _, err := v.Verify(mustSign(t, s.s, TokenSpec{User: "u", KeyID: s.kid}, testNow), testNow); err != nil {
			t.Errorf("%s: %v", s.s.Alg(), err)
		}
	}
}

func TestParseJWKSRefuses(t *testing.T) {
	k := keys(t)
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	for name, data := range map[string][]byte{
		"private RSA":      jwks(t, jose.JSONWebKey{Key: k.rsa, KeyID: "r"}),
		"private EC":       jwks(t, jose.JSONWebKey{Key: k.ec, KeyID: "e"}),
		"private Ed25519":  jwks(t, jose.JSONWebKey{Key: k.ed, KeyID: "d"}),
		"alg mismatch":     jwks(t, jose.JSONWebKey{Key: &k.rsa.PublicKey, KeyID: "r", Algorithm: "ES256"}),
		"unsupported alg":  jwks(t, jose.JSONWebKey{Key: &k.rsa.PublicKey, KeyID: "r", Algorithm: "PS256"}),
		"P-384":            jwks(t, jose.JSONWebKey{Key: &p384.PublicKey, KeyID: "p"}),
		"oct without kid":  jwks(t, jose.JSONWebKey{Key: testSecret}),
		"short oct":        jwks(t, jose.JSONWebKey{Key: []byte("short"), KeyID: "s"}),
		"oct not HS256":    jwks(t, jose.JSONWebKey{Key: testSecret, KeyID: "s", Algorithm: "HS512"}),
		"only enc keys":    jwks(t, jose.JSONWebKey{Key: &k.ec.PublicKey, KeyID: "e", Use: "enc"}),
		"no keys array":    []byte(`{"kty":"EC"}`),
		"empty":            []byte(`{"keys":[]}`),
		"unknown kty":      []byte(`{"keys":[{"kty":"XYZ","kid":"x"}]}`),
		"bad use":          []byte(`{"keys":[{"kty":"EC","use":"wrap"}]}`),
		"not JSON":         []byte(`{"keys":`),
		"point off curve":  []byte(`{"keys":[{"kty":"EC","crv":"P-256","x":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA","y":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}]}`),
		"kid control char": jwks(t, jose.JSONWebKey{Key: &k.ec.PublicKey, KeyID: "a\x01"}),
	} {
		if keys, err := ParseKeyFile(data, "f.jwks"); err == nil {
			t.Errorf("%s: accepted %v", name, keys)
		} else if !strings.Contains(err.Error(), "f.jwks") {
			t.Errorf("%s: error does not name the file: %v", name, err)
		}
	}
}

func TestParsePEM(t *testing.T) {
	k := keys(t)
	pkcs1 := pem.EncodeToMemory(&pem.Block{Type: "RSA PUBLIC KEY", Bytes: x509.MarshalPKCS1PublicKey(&k.rsa.PublicKey)})
	tmpl := &x509.Certificate{SerialNumber: bigOne(), NotBefore: testNow, NotAfter: testNow.Add(time.Hour)}
	certDER, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.ec.PublicKey, k.ec)
	if err != nil {
		t.Fatal(err)
	}
	cert := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: certDER})
	data := append(append(publicPEM(t, k.ed.Public(), "ed-1"), pkcs1...), cert...)
	got, err := ParseKeyFile(data, "keys.pem")
	if err != nil {
		t.Fatal(err)
	}
	rsaKID, _ := Thumbprint(&k.rsa.PublicKey)
	ecKID, _ := Thumbprint(&k.ec.PublicKey)
	if len(got) != 3 || got[0].ID != "ed-1" || got[0].Alg != AlgEdDSA || got[1].ID != rsaKID || got[1].Alg != AlgRS256 ||
		got[2].ID != ecKID || got[2].Alg != AlgES256 {
		t.Fatalf("keys %v", got)
	}
	// The signer's default kid is the one the gateway computes.
	if s := signer(t, k.rsa); s.KeyID() != rsaKID {
		t.Fatalf("signer kid %s, gateway kid %s", s.KeyID(), rsaKID)
	}
}

func TestParsePEMRefuses(t *testing.T) {
	k := keys(t)
	small, _ := rsa.GenerateKey(rand.Reader, 1024)
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	for name, data := range map[string][]byte{
		"private key":     privatePEM(t, k.ec),
		"RSA 1024":        publicPEM(t, &small.PublicKey, ""),
		"P-384":           publicPEM(t, &p384.PublicKey, ""),
		"nothing":         []byte("hello\n"),
		"trailing junk":   append(publicPEM(t, k.ed.Public(), ""), "junk"...),
		"bad DER":         pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: []byte{1, 2, 3}}),
		"other block":     pem.EncodeToMemory(&pem.Block{Type: "DH PARAMETERS", Bytes: []byte{1}}),
		"duplicate kid":   nil, // below
		"kid too long":    publicPEM(t, k.ed.Public(), strings.Repeat("k", MaxKeyIDLen+1)),
		"empty file":      {},
		"whitespace only": []byte("  \n"),
	} {
		if data == nil {
			continue
		}
		if _, err := ParseKeyFile(data, "f.pem"); err == nil {
			t.Errorf("%s: accepted", name)
		} else if !strings.Contains(err.Error(), "f.pem") {
			t.Errorf("%s: error does not name the file: %v", name, err)
		}
	}
	a := must(ParsePEM(publicPEM(t, k.ed.Public(), "same"), "a.pem"))
	b := must(ParsePEM(publicPEM(t, &k.ec.PublicKey, "same"), "b.pem"))
	if _, err := NewKeySet(append(a, b...)...); err == nil || !strings.Contains(err.Error(), `kid "same" names two keys`) {
		t.Fatalf("duplicate kid: %v", err)
	}
	if _, err := NewKeySet(Key{ID: "x", Alg: AlgHS256}); err == nil {
		t.Fatal("a key without material")
	}
}

func TestReadSecretFile(t *testing.T) {
	dir := t.TempDir()
	p := writeFile(t, dir, "secret", append(testSecret, " \r\n"...))
	b, err := ReadSecretFile(p)
	if err != nil || string(b) != string(testSecret) {
		t.Fatalf("ReadSecretFile: %q %v", b, err)
	}
	writeFile(t, dir, "secret", []byte("short\n"))
	if _, err := ReadSecretFile(p); err == nil || !strings.Contains(err.Error(), p) {
		t.Fatalf("short secret: %v", err)
	}
	big := writeFile(t, dir, "big", make([]byte, MaxKeyFileBytes+1))
	if _, err := ReadSecretFile(big); err == nil {
		t.Fatal("a file over the bound")
	}
}
