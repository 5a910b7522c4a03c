package auth

import (
	"bytes"
	"fmt"
	"io"
	"os"
)

// MaxKeyFileBytes bounds a key file (PEM or JWKS).
const MaxKeyFileBytes = 1 << 20

// Source names the files a Verifier's keys are read from.
type Source struct {
	// SecretFile holds an HS256 secret (the agent's --secret-file), read
	// by ReadSecretFile. Optional.
	SecretFile string
	// SecretKeyID is the secret's kid (--secret-kid). Empty: the secret
	// has none, and verifies tokens without a kid while it is the only
	// HS256 key.
	SecretKeyID string
	// KeyFiles are PEM or JWKS files (--token-keys), told apart by their
	// content: a JWKS starts with "{".
	KeyFiles []string
}

// empty reports whether the source names no file.
func (s Source) empty() bool { return s.SecretFile == "" && len(s.KeyFiles) == 0 }

// LoadKeys reads every file of src and returns their keys as one set. Any
// unreadable file, bad key or duplicate kid fails the whole load.
func LoadKeys(src Source) (*KeySet, error) {
	var keys []Key
	if src.SecretFile != "" {
		secret, err := ReadSecretFile(src.SecretFile)
		if err != nil {
			return nil, err
		}
		k, err := NewSecretKey(secret, src.SecretKeyID)
		if err != nil {
			return nil, fmt.Errorf("secret file %s: %w", src.SecretFile, err)
		}
		k.Source = src.SecretFile
		keys = append(keys, k)
	}
	for _, path := range src.KeyFiles {
		ks, err := ReadKeyFile(path)
		if err != nil {
			return nil, err
		}
		keys = append(keys, ks...)
	}
	set, err := NewKeySet(keys...)
	if err != nil {
		return nil, fmt.Errorf("token keys: %w", err)
	}
	return set, nil
}

// ReadKeyFile reads the keys of one PEM or JWKS file.
func ReadKeyFile(path string) ([]Key, error) {
	data, err := readBounded(path)
	if err != nil {
		return nil, fmt.Errorf("read key file: %w", err)
	}
	return ParseKeyFile(data, path)
}

// ParseKeyFile parses the content of a key file: a JWKS (ParseJWKS) when it
// starts with "{", PEM (ParsePEM) otherwise.
func ParseKeyFile(data []byte, source string) ([]Key, error) {
	if t := bytes.TrimSpace(data); len(t) > 0 && t[0] == '{' {
		return ParseJWKS(t, source)
	}
	return ParsePEM(data, source)
}

// ReadSecretFile reads an HS256 secret: the file's bytes without trailing
// spaces, tabs, carriage returns and newlines (so a file made with echo
// works), at least MinSecretBytes long. Nothing else is decoded: a base64
// text is used as the text, not its decoding.
func ReadSecretFile(path string) ([]byte, error) {
	b, err := readBounded(path)
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

func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxKeyFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxKeyFileBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, MaxKeyFileBytes)
	}
	return b, nil
}
