package webhook

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// Signing, as the Standard Webhooks specification says
// (https://github.com/standard-webhooks/standard-webhooks/blob/main/spec/standard-webhooks.md):
//
//	webhook-id: msg_...                 the event's id, the same on every attempt
//	webhook-timestamp: 1674087231       the attempt's time, Unix seconds
//	webhook-signature: v1,<base64>      HMAC-SHA256 of "<id>.<timestamp>.<body>",
//	                                    one per secret, space-separated
//
// A secret is written "whsec_" and the base64 of 24 to 64 random bytes.

// Header names.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// Secret sizes, in bytes (the specification's 192 to 512 bits).
const (
	MinSecretBytes = 24
	MaxSecretBytes = 64
)

const secretPrefix = "whsec_"

// Errors of Verify, for callers to test.
var (
	ErrMissingHeaders = errors.New("webhook: missing webhook-id, webhook-timestamp or webhook-signature")
	ErrTimestamp      = errors.New("webhook: timestamp outside the tolerance")
	ErrSignature      = errors.New("webhook: no signature matches")
)

// ParseSecret decodes a secret written "whsec_<base64>" (the prefix may be
// left out).
func ParseSecret(s string) ([]byte, error) {
	s = strings.TrimPrefix(strings.TrimSpace(s), secretPrefix)
	key, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("webhook secret: not whsec_ and base64: %w", err)
	}
	if len(key) < MinSecretBytes || len(key) > MaxSecretBytes {
		return nil, fmt.Errorf("webhook secret: %d bytes, want %d to %d", len(key), MinSecretBytes, MaxSecretBytes)
	}
	return key, nil
}

// FormatSecret writes key as "whsec_<base64>".
func FormatSecret(key []byte) string { return secretPrefix + base64.StdEncoding.EncodeToString(key) }

// NewSecret returns a fresh random secret of 32 bytes.
func NewSecret() []byte {
	key := make([]byte, 32)
	_, _ = rand.Read(key) // crypto/rand.Read never fails
	return key
}

// ParseSecrets parses a secret file's text: one secret per line, blank
// lines and lines starting with # ignored, at least one. Every secret signs
// each request: list the new secret with the old one while receivers move
// to it (the specification's zero-downtime rotation).
func ParseSecrets(text string) ([][]byte, error) {
	var keys [][]byte
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, err := ParseSecret(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", i+1, err)
		}
		keys = append(keys, key)
	}
	if len(keys) == 0 {
		return nil, errors.New("no webhook secret (want lines of whsec_<base64>)")
	}
	return keys, nil
}

// ReadSecretFile reads a file of secrets (ParseSecrets).
func ReadSecretFile(path string) ([][]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	keys, err := ParseSecrets(string(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return keys, nil
}

// Sign returns the v1 signature of a message with key.
func Sign(key []byte, id string, timestamp int64, body []byte) string {
	return "v1," + base64.StdEncoding.EncodeToString(mac(key, id, strconv.FormatInt(timestamp, 10), body))
}

func mac(key []byte, id, timestamp string, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id))
	m.Write([]byte{'.'})
	m.Write([]byte(timestamp))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// signatures returns the webhook-signature header: one signature per key.
func signatures(keys [][]byte, id string, timestamp int64, body []byte) string {
	sigs := make([]string, len(keys))
	for i, k := range keys {
		sigs[i] = Sign(k, id, timestamp, body)
	}
	return strings.Join(sigs, " ")
}

// Verify checks a received webhook: its headers are present, its timestamp
// is within tolerance of now, and one of its v1 signatures is body's under
// one of keys. Signatures of other versions are skipped.
func Verify(h http.Header, body []byte, keys [][]byte, now time.Time, tolerance time.Duration) error {
	id, ts, sigs := h.Get(HeaderID), h.Get(HeaderTimestamp), h.Get(HeaderSignature)
	if id == "" || ts == "" || sigs == "" {
		return ErrMissingHeaders
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: %q is not Unix seconds", ErrTimestamp, ts)
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return ErrTimestamp
	}
	for _, sig := range strings.Fields(sigs) {
		v, b64, ok := strings.Cut(sig, ",")
		if !ok || v != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			continue
		}
		for _, k := range keys {
			if subtle.ConstantTimeCompare(got, mac(k, id, ts, body)) == 1 {
				return nil
			}
		}
	}
	return ErrSignature
}
