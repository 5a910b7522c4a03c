package auth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

var testNow = time.Date(2026, 9, 24, 17, 45, 0, 0, time.UTC)

var testSecret = []byte("0123456789abcdef0123456789abcdef")

// testKeys are generated once per test binary: RSA generation is slow.
type testKeys struct {
	rsa *rsa.PrivateKey
	ec  *ecdsa.PrivateKey
	ed  ed25519.PrivateKey
}

var (
	keysOnce sync.Once
	keysVal  testKeys
)

func keys(t testing.TB) testKeys {
	t.Helper()
	keysOnce.Do(func() {
		r, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			panic(err)
		}
		e, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			panic(err)
		}
		_, d, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			panic(err)
		}
		keysVal = testKeys{rsa: r, ec: e, ed: d}
	})
	return keysVal
}

// publicPEM encodes pub as a PUBLIC KEY block, with a kid header when kid
// is not empty.
func publicPEM(t testing.TB, pub crypto.PublicKey, kid string) []byte {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	b := &pem.Block{Type: "PUBLIC KEY", Bytes: der}
	if kid != "" {
		b.Headers = map[string]string{"kid": kid}
	}
	return pem.EncodeToMemory(b)
}

func privatePEM(t testing.TB, priv crypto.PrivateKey) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

func signer(t testing.TB, priv crypto.PrivateKey) *Signer {
	t.Helper()
	s, err := ParseSigningKey(privatePEM(t, priv))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func writeFile(t testing.TB, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func mustSign(t testing.TB, s *Signer, spec TokenSpec, now time.Time) string {
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

func bigOne() *big.Int { return big.NewInt(1) }

// jwtSign returns the base64url HS256 signature of signing under
// testSecret.
func jwtSign(signing string) (string, error) {
	sig, err := jwt.SigningMethodHS256.Sign(signing, testSecret)
	if err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(sig), nil
}
