package node

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Client tokens are HS256 JWTs: "sub" is the user, "exp" is required. The
// gateway and `rollcall token` share the key through a secret file.

// MinSecretBytes is the shortest HS256 key accepted (RFC 7518 §3.2 wants a
// key at least as long as the hash output).
const MinSecretBytes = 32

// ReadSecretFile reads an HS256 key from a file, without trailing
// whitespace (so `echo`-made files work), and checks its length.
func ReadSecretFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read secret file: %w", err)
	}
	b = bytes.TrimRight(b, " \t\r\n")
	if len(b) < MinSecretBytes {
		return nil, fmt.Errorf("secret file %s holds %d bytes; want at least %d (e.g. head -c 32 /dev/urandom | base64 > %s)",
			path, len(b), MinSecretBytes, path)
	}
	return b, nil
}

// NewToken returns an HS256 token for user, valid from now for ttl.
func NewToken(secret []byte, user string, ttl time.Duration, now time.Time) (string, error) {
	if user == "" {
		return "", errors.New("token: empty user")
	}
	if ttl <= 0 {
		return "", fmt.Errorf("token: ttl must be positive, got %v", ttl)
	}
	if len(secret) < MinSecretBytes {
		return "", fmt.Errorf("token: secret must be at least %d bytes", MinSecretBytes)
	}
	t := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.RegisteredClaims{
		Subject:   user,
		IssuedAt:  jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
	})
	s, err := t.SignedString(secret)
	if err != nil {
		return "", fmt.Errorf("token: sign: %w", err)
	}
	return s, nil
}

// verifyToken checks that token is a valid, unexpired HS256 token signed
// with the node's secret for user. The error is safe to show the client.
func (n *Node) verifyToken(token, user string) error {
	if token == "" {
		return errors.New("missing token")
	}
	var claims jwt.RegisteredClaims
	_, err := jwt.ParseWithClaims(token, &claims,
		func(*jwt.Token) (any, error) { return n.cfg.Secret, nil },
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithExpirationRequired(),
		jwt.WithTimeFunc(n.clock.Now),
	)
	if err != nil {
		return fmt.Errorf("invalid token: %w", err)
	}
	if claims.Subject != user {
		return errors.New("token is for another user")
	}
	return nil
}
