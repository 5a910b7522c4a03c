package gossip

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/hashicorp/memberlist"

	"github.com/rollcall/rollcall/dissem"
)

// Key rotation, as serf does it: install a new key everywhere, make it the
// primary (encrypting) key everywhere, then remove the old one. Each step is
// applied locally and sent over TCP (encrypted with the current keys) to
// every live member.

// ParseKey decodes a base64 AES key of 16, 24 or 32 bytes.
func ParseKey(s string) ([]byte, error) {
	k, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("gossip key is not base64: %w", err)
	}
	if n := len(k); n != 16 && n != 24 && n != 32 {
		return nil, fmt.Errorf("gossip key is %d bytes; want 16, 24 or 32", n)
	}
	return k, nil
}

// LoadKeyring reads a keyring file: base64 keys, primary first, either one
// per line (blank lines and # comments ignored) or as a JSON array (serf's
// format).
func LoadKeyring(path string) (*memberlist.Keyring, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read keyring: %w", err)
	}
	var enc []string
	if text := strings.TrimSpace(string(b)); strings.HasPrefix(text, "[") {
		if err := json.Unmarshal(b, &enc); err != nil {
			return nil, fmt.Errorf("keyring %s: bad JSON array of base64 keys: %w", path, err)
		}
	} else {
		for _, line := range strings.Split(text, "\n") {
			if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
				enc = append(enc, line)
			}
		}
	}
	if len(enc) == 0 {
		return nil, fmt.Errorf("keyring %s holds no keys", path)
	}
	keys := make([][]byte, len(enc))
	for i, s := range enc {
		if keys[i], err = ParseKey(s); err != nil {
			return nil, fmt.Errorf("keyring %s entry %d: %w", path, i+1, err)
		}
	}
	return memberlist.NewKeyring(keys, keys[0])
}

// KeyInfo identifies an installed gossip key without revealing it.
type KeyInfo struct {
	ID      string `json:"id"`      // KeyID of the key
	Primary bool   `json:"primary"` // the key gossip is encrypted with
}

// KeyID names a gossip key without revealing it: the first 8 bytes of the
// key's SHA-256, in hex. Operators match it against `rollcall keys id KEY`.
func KeyID(key []byte) string {
	sum := sha256.Sum256(key)
	return hex.EncodeToString(sum[:8])
}

// KeyIDs lists the installed keys by KeyID, primary first; nil when gossip
// is not encrypted. The keys themselves are never returned.
func (c *Cluster) KeyIDs() []KeyInfo {
	if c.cfg.Keyring == nil {
		return nil
	}
	var out []KeyInfo
	for i, k := range c.cfg.Keyring.GetKeys() {
		out = append(out, KeyInfo{ID: KeyID(k), Primary: i == 0})
	}
	return out
}

// KeyOp applies a keyring operation ("install", "use" or "remove") on this
// node and then on every live member, waiting for each to acknowledge. It
// returns the members that failed, with their errors; a step should succeed
// everywhere before the next one is taken (install, then use, then remove).
func (c *Cluster) KeyOp(ctx context.Context, op string, key []byte) (map[string]error, error) {
	probe, err := dissem.EncodeKeyOp(dissem.KeyOp{Op: op, Key: key, FromNode: c.cfg.Name})
	if err != nil {
		return nil, err
	}
	if _, err := dissem.DecodeKeyOp(probe[2:]); err != nil {
		return nil, err
	}
	if err := c.applyKeyOp(dissem.KeyOp{Op: op, Key: key}); err != nil {
		return nil, fmt.Errorf("on %s: %w", c.cfg.Name, err)
	}
	var mu sync.Mutex
	failed := make(map[string]error)
	var wg sync.WaitGroup
	for _, name := range c.liveMembers() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := c.request(ctx, name, func(id uint64) ([]byte, error) {
				return dissem.EncodeKeyOp(dissem.KeyOp{Op: op, Key: key, ID: id, FromNode: c.cfg.Name})
			})
			if err != nil {
				mu.Lock()
				failed[name] = err
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(failed) > 0 {
		return failed, fmt.Errorf("keyring %s failed on %d member(s)", op, len(failed))
	}
	return nil, nil
}

func (c *Cluster) applyKeyOp(k dissem.KeyOp) error {
	kr := c.cfg.Keyring
	if kr == nil {
		return fmt.Errorf("gossip encryption is off: start agents with --gossip-key or --keyring-file to rotate keys")
	}
	switch k.Op {
	case "install":
		return kr.AddKey(k.Key)
	case "use":
		return kr.UseKey(k.Key)
	case "remove":
		return kr.RemoveKey(k.Key)
	}
	return fmt.Errorf("unknown key op %q", k.Op)
}
