package auth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// TokenSpec is what a minted token says.
type TokenSpec struct {
	User     string        // sub; required
	TTL      time.Duration // exp is now+TTL; required, positive
	KeyID    string        // kid header; empty takes the signer's default
	Audience string        // aud; optional
	Issuer   string        // iss; optional
	// Grants is the rollcall claim; nil mints a token with the defaults
	// (read only itself, join nothing, send to nobody).
	Grants *GrantsClaim
}

// Signer signs tokens with one key: an HS256 secret or an RSA, EC P-256
// or Ed25519 private key.
type Signer struct {
	alg    string
	key    any // []byte or a crypto.Signer
	keyID  string
	method jwt.SigningMethod
}

// NewSecretSigner returns a signer for an HS256 secret. Its default kid is
// none.
func NewSecretSigner(secret []byte) (*Signer, error) {
	if len(secret) < MinSecretBytes {
		return nil, fmt.Errorf("token: secret must be at least %d bytes", MinSecretBytes)
	}
	return &Signer{alg: AlgHS256, key: secret, method: jwt.SigningMethodHS256}, nil
}

// ParseSigningKey returns a signer for a PEM private key (PKCS#8, PKCS#1
// RSA or SEC 1 EC). Its default kid is the RFC 7638 thumbprint of the
// public key, which is the kid the gateway gives that public key in a PEM
// file without a kid header.
func ParseSigningKey(data []byte) (*Signer, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("no PEM block")
	}
	var priv any
	var err error
	switch block.Type {
	case "PRIVATE KEY":
		priv, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		priv, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		priv, err = x509.ParseECPrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("PEM block %q is not a private key", block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("parse private key: %w", err)
	}
	signer, ok := priv.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("unsupported private key %T", priv)
	}
	k, err := publicKey(signer.Public(), "", "")
	if err != nil {
		return nil, err
	}
	s := &Signer{alg: k.Alg, key: signer, keyID: k.ID}
	switch priv.(type) {
	case *rsa.PrivateKey:
		s.method = jwt.SigningMethodRS256
	case *ecdsa.PrivateKey:
		s.method = jwt.SigningMethodES256
	case ed25519.PrivateKey:
		s.method = jwt.SigningMethodEdDSA
	}
	return s, nil
}

// LoadSigningKey reads a PEM private key file (ParseSigningKey).
func LoadSigningKey(path string) (*Signer, error) {
	data, err := readBounded(path)
	if err != nil {
		return nil, fmt.Errorf("read key: %w", err)
	}
	s, err := ParseSigningKey(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// Alg returns the signer's algorithm.
func (s *Signer) Alg() string { return s.alg }

// KeyID returns the kid tokens get when TokenSpec.KeyID is empty.
func (s *Signer) KeyID() string { return s.keyID }

// Sign returns a token for spec, issued at now.
func (s *Signer) Sign(spec TokenSpec, now time.Time) (string, error) {
	if spec.User == "" {
		return "", errors.New("token: empty user")
	}
	if spec.TTL <= 0 {
		return "", fmt.Errorf("token: ttl must be positive, got %v", spec.TTL)
	}
	if spec.Grants != nil {
		if _, err := ParseGrants(spec.Grants); err != nil {
			return "", fmt.Errorf("token: %w", err)
		}
	}
	c := claims{
		RegisteredClaims: jwt.RegisteredClaims{
			Subject:   spec.User,
			Issuer:    spec.Issuer,
			IssuedAt:  jwt.NewNumericDate(now),
			ExpiresAt: jwt.NewNumericDate(now.Add(spec.TTL)),
		},
		Rollcall: spec.Grants,
	}
	if spec.Audience != "" {
		c.Audience = jwt.ClaimStrings{spec.Audience}
	}
	t := jwt.NewWithClaims(s.method, c)
	kid := spec.KeyID
	if kid == "" {
		kid = s.keyID
	}
	if kid != "" {
		if err := checkKeyID(kid); err != nil {
			return "", fmt.Errorf("token: %w", err)
		}
		t.Header["kid"] = kid
	}
	out, err := t.SignedString(s.key)
	if err != nil {
		return "", fmt.Errorf("token: sign: %w", err)
	}
	return out, nil
}
