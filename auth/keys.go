package auth

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/go-jose/go-jose/v4"
)

// Library choice: JWKS files are parsed with go-jose (its JSONWebKey
// decodes the base64url parameters, checks that an EC point is on its
// curve and computes RFC 7638 thumbprints), tokens are verified with
// golang-jwt (the gateway's JWT library already, with the claim checks
// built in). Doing JWK decoding by hand over crypto/x509 would be more code
// with more places to get point validation wrong.

// Signing algorithms accepted. Every key has exactly one; a token is
// verified only with a key of its own alg.
const (
	AlgHS256 = "HS256" // HMAC SHA-256 with a shared secret
	AlgRS256 = "RS256" // RSA PKCS#1 v1.5 SHA-256, keys of 2048 to 8192 bits
	AlgES256 = "ES256" // ECDSA P-256 SHA-256
	AlgEdDSA = "EdDSA" // Ed25519
)

// Algorithms lists the accepted algorithms; "none" and every other one are
// refused.
func Algorithms() []string { return []string{AlgHS256, AlgRS256, AlgES256, AlgEdDSA} }

// Key size bounds.
const (
	// MinSecretBytes is the shortest HS256 secret accepted (RFC 7518
	// section 3.2: at least the hash output).
	MinSecretBytes = 32
	minRSABits     = 2048
	maxRSABits     = 8192
	// MaxKeyIDLen bounds a kid.
	MaxKeyIDLen = 256
	// MaxKeys bounds the keys of one KeySet.
	MaxKeys = 1000
)

// Key is one verification key. The zero Key is not usable; make keys with
// NewSecretKey, ParsePEM or ParseJWKS.
type Key struct {
	// ID is the key id tokens name in their "kid" header. Empty only for an
	// HS256 secret given without one.
	ID string
	// Alg is the key's algorithm (AlgHS256, ...).
	Alg string
	// Source says where the key came from (a file name), for messages.
	Source string

	material any // []byte, *rsa.PublicKey, *ecdsa.PublicKey or ed25519.PublicKey
}

// String names the key without its material.
func (k Key) String() string {
	id := k.ID
	if id == "" {
		id = "(no kid)"
	}
	if k.Source == "" {
		return fmt.Sprintf("%s %s", id, k.Alg)
	}
	return fmt.Sprintf("%s %s from %s", id, k.Alg, k.Source)
}

// equal reports whether two keys are the same key under the same id.
func (k Key) equal(o Key) bool {
	if k.ID != o.ID || k.Alg != o.Alg {
		return false
	}
	switch m := k.material.(type) {
	case []byte:
		om, ok := o.material.([]byte)
		return ok && bytes.Equal(m, om)
	case interface{ Equal(crypto.PublicKey) bool }:
		return m.Equal(o.material)
	}
	return false
}

// NewSecretKey returns an HS256 key; kid may be empty.
func NewSecretKey(secret []byte, kid string) (Key, error) {
	if len(secret) < MinSecretBytes {
		return Key{}, fmt.Errorf("HS256 secret holds %d bytes; want at least %d", len(secret), MinSecretBytes)
	}
	if err := checkKeyID(kid); err != nil {
		return Key{}, err
	}
	return Key{ID: kid, Alg: AlgHS256, material: bytes.Clone(secret)}, nil
}

func checkKeyID(kid string) error {
	if len(kid) > MaxKeyIDLen {
		return fmt.Errorf("kid longer than %d bytes", MaxKeyIDLen)
	}
	for _, r := range kid {
		if r < 0x20 || r == 0x7f {
			return errors.New("kid contains a control character")
		}
	}
	return nil
}

// publicKey returns the Key for an asymmetric public key, its alg chosen
// by its type; wantAlg, when not empty, must agree.
func publicKey(pub any, kid, wantAlg string) (Key, error) {
	var alg string
	switch p := pub.(type) {
	case *rsa.PublicKey:
		if bits := p.N.BitLen(); bits < minRSABits || bits > maxRSABits {
			return Key{}, fmt.Errorf("RSA key of %d bits; want %d to %d", bits, minRSABits, maxRSABits)
		}
		alg = AlgRS256
	case *ecdsa.PublicKey:
		if p.Curve != elliptic.P256() {
			return Key{}, fmt.Errorf("EC key on curve %s; want P-256 (ES256)", p.Curve.Params().Name)
		}
		alg = AlgES256
	case ed25519.PublicKey:
		if len(p) != ed25519.PublicKeySize {
			return Key{}, errors.New("Ed25519 key of the wrong size")
		}
		alg = AlgEdDSA
	default:
		return Key{}, fmt.Errorf("unsupported key type %T (want RSA, EC P-256 or Ed25519)", pub)
	}
	if wantAlg != "" && wantAlg != alg {
		return Key{}, fmt.Errorf("key says alg %q but is a %s key", wantAlg, alg)
	}
	if kid == "" {
		tp, err := Thumbprint(pub)
		if err != nil {
			return Key{}, err
		}
		kid = tp
	}
	if err := checkKeyID(kid); err != nil {
		return Key{}, err
	}
	return Key{ID: kid, Alg: alg, material: pub}, nil
}

// Thumbprint returns the RFC 7638 SHA-256 thumbprint of a public key,
// base64url without padding: the kid a PEM key gets when it names none,
// and the kid `rollcall token --key` puts in its tokens by default.
func Thumbprint(pub crypto.PublicKey) (string, error) {
	jwk := jose.JSONWebKey{Key: pub}
	b, err := jwk.Thumbprint(crypto.SHA256)
	if err != nil {
		return "", fmt.Errorf("thumbprint: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// ParsePEM returns the public keys of PEM data: PUBLIC KEY (PKIX: RSA, EC
// P-256, Ed25519), RSA PUBLIC KEY (PKCS#1) and CERTIFICATE blocks, each
// key's kid taken from a "kid" PEM header when the block has one, and
// otherwise its RFC 7638 thumbprint. A private key is refused: the gateway
// only needs the public half. source names the data in errors.
func ParsePEM(data []byte, source string) ([]Key, error) {
	var keys []Key
	rest := data
	for i := 1; ; i++ {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		k, err := pemKey(block)
		if err != nil {
			return nil, fmt.Errorf("%s: PEM block %d (%s): %w", source, i, block.Type, err)
		}
		k.Source = source
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%s: no PEM public key found", source)
	}
	if len(bytes.TrimSpace(rest)) > 0 {
		return nil, fmt.Errorf("%s: data after the last PEM block", source)
	}
	return keys, nil
}

func pemKey(block *pem.Block) (Key, error) {
	kid := block.Headers["kid"]
	var pub any
	var err error
	switch block.Type {
	case "PUBLIC KEY":
		pub, err = x509.ParsePKIXPublicKey(block.Bytes)
	case "RSA PUBLIC KEY":
		pub, err = x509.ParsePKCS1PublicKey(block.Bytes)
	case "CERTIFICATE":
		var cert *x509.Certificate
		cert, err = x509.ParseCertificate(block.Bytes)
		if err == nil {
			pub = cert.PublicKey
		}
	default:
		if strings.Contains(block.Type, "PRIVATE KEY") {
			return Key{}, errors.New("a private key: give the gateway the public key only (openssl pkey -in key.pem -pubout)")
		}
		return Key{}, errors.New("not a public key or certificate")
	}
	if err != nil {
		return Key{}, err
	}
	return publicKey(pub, kid, "")
}

// ParseJWKS returns the keys of a JWK Set (RFC 7517 section 5): RSA, EC
// P-256 and Ed25519 (OKP) public keys, and "oct" HS256 secrets. A key's alg,
// when given, must be the one its type implies (RS256, ES256, EdDSA,
// HS256); a key without a kid gets its RFC 7638 thumbprint (an oct key must
// have a kid). Keys whose "use" is "enc" are skipped; any other key that
// cannot verify signatures, and any private key, is an error.
func ParseJWKS(data []byte, source string) ([]Key, error) {
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(data, &set); err != nil {
		return nil, fmt.Errorf("%s: not a JWK Set: %w", source, err)
	}
	if set.Keys == nil {
		return nil, fmt.Errorf("%s: not a JWK Set: no \"keys\" array", source)
	}
	var keys []Key
	for i, raw := range set.Keys {
		k, skip, err := jwksKey(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: key %d: %w", source, i, err)
		}
		if skip {
			continue
		}
		k.Source = source
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%s: no signature key in the JWK Set", source)
	}
	return keys, nil
}

func jwksKey(raw json.RawMessage) (k Key, skip bool, err error) {
	var params struct {
		Kty string          `json:"kty"`
		Use string          `json:"use"`
		D   json.RawMessage `json:"d"`
		P   json.RawMessage `json:"p"`
	}
	if err := json.Unmarshal(raw, &params); err != nil {
		return Key{}, false, fmt.Errorf("not a JWK: %w", err)
	}
	if params.Use == "enc" {
		return Key{}, true, nil
	}
	if params.Use != "" && params.Use != "sig" {
		return Key{}, false, fmt.Errorf("use %q (want sig)", params.Use)
	}
	if params.D != nil || params.P != nil {
		return Key{}, false, errors.New("a private key: publish only public keys")
	}
	var jwk jose.JSONWebKey
	if err := jwk.UnmarshalJSON(raw); err != nil {
		return Key{}, false, fmt.Errorf("kty %q: %w", params.Kty, err)
	}
	if secret, ok := jwk.Key.([]byte); ok {
		if jwk.Algorithm != "" && jwk.Algorithm != AlgHS256 {
			return Key{}, false, fmt.Errorf("oct key with alg %q (want HS256)", jwk.Algorithm)
		}
		if jwk.KeyID == "" {
			return Key{}, false, errors.New("an oct (HS256) key needs a kid")
		}
		k, err := NewSecretKey(secret, jwk.KeyID)
		return k, false, err
	}
	if !jwk.IsPublic() {
		return Key{}, false, errors.New("a private key: publish only public keys")
	}
	k, err = publicKey(jwk.Key, jwk.KeyID, jwk.Algorithm)
	return k, false, err
}

// KeySet is an immutable set of verification keys, indexed by kid and by
// alg. Safe for concurrent use.
type KeySet struct {
	keys  []Key
	byKID map[string]Key
	byAlg map[string][]Key
}

// NewKeySet returns the set of keys. Two keys with one kid are refused
// (a kid must say which key); keys without a kid are allowed, but a token
// without a kid is only verified when its alg has exactly one key.
func NewKeySet(keys ...Key) (*KeySet, error) {
	if len(keys) > MaxKeys {
		return nil, fmt.Errorf("%d keys; at most %d", len(keys), MaxKeys)
	}
	ks := &KeySet{byKID: make(map[string]Key, len(keys)), byAlg: make(map[string][]Key)}
	for _, k := range keys {
		if k.material == nil || !slices.Contains(Algorithms(), k.Alg) {
			return nil, fmt.Errorf("key %s: not a usable key", k)
		}
		if k.ID != "" {
			if old, dup := ks.byKID[k.ID]; dup {
				return nil, fmt.Errorf("kid %q names two keys (%s and %s)", k.ID, old, k)
			}
			ks.byKID[k.ID] = k
		}
		ks.byAlg[k.Alg] = append(ks.byAlg[k.Alg], k)
		ks.keys = append(ks.keys, k)
	}
	return ks, nil
}

// Keys returns the keys, in the order they were given.
func (ks *KeySet) Keys() []Key { return slices.Clone(ks.keys) }

// Len returns the number of keys.
func (ks *KeySet) Len() int { return len(ks.keys) }

// Errors of key selection, wrapped in Verify's errors.
var (
	ErrUnknownKeyID = errors.New("unknown key id")
	ErrAlgMismatch  = errors.New("token alg does not match its key")
	ErrNoKey        = errors.New("no key for the token's alg")
	ErrAmbiguousKey = errors.New("token without a kid and several keys of its alg")
)

// lookup returns the key material to verify a token of alg with kid
// (empty: the token names none). A named kid is the only key tried, and
// must be of the token's alg; without a kid, the token's alg must have
// exactly one key.
func (ks *KeySet) lookup(alg, kid string) (any, error) {
	if kid != "" {
		k, ok := ks.byKID[kid]
		if !ok {
			return nil, fmt.Errorf("%w %q", ErrUnknownKeyID, truncate(kid, 64))
		}
		if k.Alg != alg {
			return nil, fmt.Errorf("%w: the token says %s, key %q is %s", ErrAlgMismatch, alg, truncate(kid, 64), k.Alg)
		}
		return k.material, nil
	}
	switch cands := ks.byAlg[alg]; len(cands) {
	case 0:
		return nil, fmt.Errorf("%w %s", ErrNoKey, alg)
	case 1:
		return cands[0].material, nil
	default:
		return nil, fmt.Errorf("%w (%d %s keys): sign tokens with a kid", ErrAmbiguousKey, len(cands), alg)
	}
}

// diff describes how next differs from ks: keys added, removed and
// replaced (same kid, new material), by their String, sorted.
func (ks *KeySet) diff(next *KeySet) []string {
	var out []string
	name := func(k Key) string { // kids are unique; a kid-less key is known by its alg
		if k.ID != "" {
			return "kid " + k.ID
		}
		return "alg " + k.Alg
	}
	old := make(map[string]Key, len(ks.keys))
	for _, k := range ks.keys {
		old[name(k)] = k
	}
	seen := make(map[string]bool, len(next.keys))
	for _, k := range next.keys {
		seen[name(k)] = true
		o, had := old[name(k)]
		switch {
		case !had:
			out = append(out, "added key "+k.String())
		case !o.equal(k):
			out = append(out, "replaced key "+k.String())
		}
	}
	for _, k := range ks.keys {
		if !seen[name(k)] {
			out = append(out, "removed key "+k.String())
		}
	}
	slices.Sort(out)
	return out
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
