package gossip

import (
	"bytes"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Fuzz targets for the operator's key readers: --gossip-key (ParseKey) and
// --keyring-file (LoadKeyring). They error, never panic, and what they
// accept is usable: keys of an AES size that round-trip through base64, a
// keyring whose primary is the file's first key. Seed corpora:
// testdata/fuzz/FuzzParseKey and FuzzLoadKeyring.

func FuzzParseKey(f *testing.F) {
	for _, n := range []int{0, 1, 15, 16, 24, 32, 33, 64} {
		f.Add(base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0xa5}, n)))
	}
	for _, s := range []string{"", "=", "====", "not base64!", "AAAA\nAAAAAAAAAAAAAAAAAAAA", "AAAAAAAAAAAAAAAAAAAAAA", " AAAAAAAAAAAAAAAAAAAAAA== "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k, err := ParseKey(s)
		if err != nil {
			return
		}
		if n := len(k); n != 16 && n != 24 && n != 32 {
			t.Fatalf("%q parsed to a %d-byte key", s, n)
		}
		again, err := ParseKey(base64.StdEncoding.EncodeToString(k))
		if err != nil || !bytes.Equal(again, k) {
			t.Fatalf("key from %q does not round-trip: %x, %v", s, again, err)
		}
	})
}

func FuzzLoadKeyring(f *testing.F) {
	k16 := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 16))
	k32 := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{2}, 32))
	for _, s := range []string{
		k32 + "\n", "# primary first\n" + k32 + "\n\n" + k16 + "\n", k16 + "\r\n" + k32 + "\r\n",
		`["` + k32 + `","` + k16 + `"]`, ` [ "` + k16 + `" ] `, `[]`, `[null]`, `[1]`, `["x"]`, `{"keys":[]}`,
		"", "\n# only comments\n", k32 + "\n" + k32 + "\n", "[" + k32, k16[:10] + "\n",
	} {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	path := filepath.Join(dir, "keyring")
	f.Fuzz(func(t *testing.T, content []byte) {
		if err := os.WriteFile(path, content, 0o600); err != nil {
			t.Fatal(err)
		}
		kr, err := LoadKeyring(path)
		if err != nil {
			return
		}
		keys := kr.GetKeys()
		primary := kr.GetPrimaryKey()
		if len(keys) == 0 || !bytes.Equal(keys[0], primary) {
			t.Fatalf("file %q: keyring of %d keys, primary %x", content, len(keys), primary)
		}
		// The keys written back one per line load as the same keyring.
		var lines []string
		for _, k := range keys {
			if n := len(k); n != 16 && n != 24 && n != 32 {
				t.Fatalf("file %q: a %d-byte key", content, n)
			}
			lines = append(lines, base64.StdEncoding.EncodeToString(k))
		}
		again := filepath.Join(dir, "again")
		if err := os.WriteFile(again, []byte(strings.Join(lines, "\n")), 0o600); err != nil {
			t.Fatal(err)
		}
		kr2, err := LoadKeyring(again)
		if err != nil {
			t.Fatalf("file %q: its keys written back do not load: %v", content, err)
		}
		keys2 := kr2.GetKeys()
		if len(keys2) != len(keys) || !bytes.Equal(kr2.GetPrimaryKey(), primary) {
			t.Fatalf("file %q: %d keys, written back %d", content, len(keys), len(keys2))
		}
	})
}
