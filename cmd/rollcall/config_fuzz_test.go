package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzAgentConfig loads an arbitrary YAML config file and environment as
// the agent does (koanf, then the flags onto the Config fields), then runs
// the checks the agent makes before it starts. Neither may panic: a bad
// file or value is an error that says something. A configuration that
// loads prints (--print-config, secrets shown) as YAML that loads back to
// the same configuration. In the file and the environment, $DIR names a
// directory holding a valid HS256 secret (secret) and a gossip key
// (gossip.key); the checks run only when every file the configuration
// names is in it, so the fuzzer reads no other file. Seed corpus:
// testdata/fuzz/FuzzAgentConfig.
func FuzzAgentConfig(f *testing.F) {
	for _, s := range [][2]string{
		{"dev: true\nclient-addr: 127.0.0.1:0\n", ""},
		{"secret-file: $DIR/secret\ngossip-addr: \"\"\ntimeout: 40s\nheartbeat: 4s\n", "ROLLCALL_MAX_LINE_BYTES=100"},
		{"dev: true\njoin: [a:7946, b:7946]\nws-allowed-origins: ['*.example.com']\n", "ROLLCALL_HTTP_ADDR="},
		{"dev: true\nheartbeat: 10s\ntimeout: 5s\n", ""},
		{"dev: true\nmax-line-bytes: -1\nrequest-rate: 1e400\noutbound-queue: 18446744073709551616\n", ""},
		{"dev: true\ngossip-key-file: $DIR/gossip.key\nkeyring-file: $DIR/none\n", "ROLLCALL_GOSSIP_PROFILE=wan\nROLLCALL_LOG_LEVEL=loud"},
		{"dev: true\nlog-level: {a: 1}\njoin: [[1]]\n", ""},
		{"- a\n- b\n", ""},
		{"dev: &x true\nhttp-addr: *x\nclient-addr: ~\n", ""},
		{"timeout: 2562047h47m16.854775807s\nhandshake-timeout: -1ns\n", "ROLLCALL_DEV=true"},
	} {
		f.Add(s[0], s[1])
	}
	dir := f.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "secret"), []byte(strings.Repeat("k", 40)), 0o600); err != nil {
		f.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "gossip.key"), []byte("c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0MTIzNDU2Nzg="), 0o600); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, file, environ string) {
		file = strings.ReplaceAll(file, "$DIR", dir)
		environ = strings.ReplaceAll(environ, "$DIR", dir)
		path := filepath.Join(t.TempDir(), "rollcall.yaml")
		if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
			t.Fatal(err)
		}
		env := strings.Split(environ, "\n")
		ac, fs, _, err := loadAgentConfig([]string{"--config", path}, env, io.Discard)
		if err != nil {
			if err.Error() == "" || !utf8.ValidString(err.Error()) && utf8.ValidString(file+environ) {
				t.Fatalf("error %q says nothing", err)
			}
			return
		}
		// What --print-config prints loads back to the same configuration.
		want := effectiveConfig(fs, false)
		var printed bytes.Buffer
		if err := writeConfig(&printed, "", want); err != nil {
			t.Fatalf("printing a loaded configuration: %v", err)
		}
		again := filepath.Join(t.TempDir(), "printed.yaml")
		if err := os.WriteFile(again, printed.Bytes(), 0o600); err != nil {
			t.Fatal(err)
		}
		_, fs2, _, err := loadAgentConfig([]string{"--config", again}, nil, io.Discard)
		if err != nil {
			t.Fatalf("the printed configuration does not load: %v\n%s", err, printed.String())
		}
		if got := effectiveConfig(fs2, false); !reflect.DeepEqual(got, want) {
			for k := range want {
				if !reflect.DeepEqual(got[k], want[k]) {
					t.Errorf("%s: printed %#v, loaded back %#v", k, want[k], got[k])
				}
			}
			t.Fatalf("the printed configuration loads back different:\n%s", printed.String())
		}
		if !onlyFilesIn(ac, dir) {
			return
		}
		if err := ac.check(); err != nil && err.Error() == "" {
			t.Fatal("a check failed with an empty error")
		}
	})
}

// onlyFilesIn reports whether every file the configuration names is in dir.
func onlyFilesIn(ac *agentConfig, dir string) bool {
	files := append([]string{ac.TokenSource.SecretFile, ac.AdminTokenFile, ac.TLS.CertFile, ac.TLS.KeyFile,
		ac.TLS.ClientCAFile, ac.GossipKeyFile, ac.KeyringFile}, ac.TokenSource.KeyFiles...)
	for _, f := range files {
		if f != "" && (!strings.HasPrefix(f, dir+string(filepath.Separator)) || strings.Contains(f, "..")) {
			return false
		}
	}
	return true
}
