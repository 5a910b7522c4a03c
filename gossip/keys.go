package gossip

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"

	"github.com/hashicorp/memberlist"
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

// LoadKeyring reads a keyring file: a JSON array of base64 keys, the first
// being the primary one (serf's format).
func LoadKeyring(path string) (*memberlist.Keyring, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read keyring: %w", err)
	}
	var enc []string
	if err := json.Unmarshal(b, &enc); err != nil {
		return nil, fmt.Errorf("keyring %s: want a JSON array of base64 keys: %w", path, err)
	}
	if len(enc) == 0 {
		return nil, fmt.Errorf("keyring %s is empty", path)
	}
	keys := make([][]byte, len(enc))
	for i, s := range enc {
		if keys[i], err = ParseKey(s); err != nil {
			return nil, fmt.Errorf("keyring %s entry %d: %w", path, i, err)
		}
	}
	return memberlist.NewKeyring(keys, keys[0])
}

// Keys lists the installed keys (base64), primary first; nil when gossip is
// not encrypted.
func (c *Cluster) Keys() []string {
	if c.cfg.Keyring == nil {
		return nil
	}
	var out []string
	for _, k := range c.cfg.Keyring.GetKeys() {
		out = append(out, base64.StdEncoding.EncodeToString(k))
	}
	return out
}

// KeyOp applies a keyring operation ("install", "use" or "remove") on this
// node and every live member.
func (c *Cluster) KeyOp(op string, key []byte) error {
	k := keyOp{Op: op, Key: key}
	msg, err := encodeKeyOp(k)
	if err != nil {
		return err
	}
	if _, err := decodeKeyOp(msg[2:]); err != nil {
		return err
	}
	if err := c.applyKeyOp(k); err != nil {
		return err
	}
	c.sendAll(c.otherMembers(), msg, true)
	return nil
}

func (c *Cluster) applyKeyOp(k keyOp) error {
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
