package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"flag"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/knadh/koanf/parsers/yaml"
	"go.uber.org/zap"

	"github.com/rollcall/rollcall/gossip"
)

// writeConfigFile writes a YAML config file and returns its path.
func writeConfigFile(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "rollcall.yaml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// newAgentFlagSet is the agent's flag set over its defaults.
func newAgentFlagSet() *flag.FlagSet {
	ac := defaultAgentConfig()
	fs, _ := agentFlagSet(&ac, io.Discard)
	return fs
}

// testAgentConfig is the agent's defaults with a name, a free client port
// and short timings.
func testAgentConfig() agentConfig {
	ac := defaultAgentConfig()
	ac.Node.Name, ac.Node.ClientAddr = "n", "127.0.0.1:0"
	ac.Node.Heartbeat, ac.Node.Timeout = time.Second, 3*time.Second
	return ac
}

func parseAgent(t *testing.T, args, environ []string) (*agentConfig, error) {
	t.Helper()
	af, _, _, err := loadAgentConfig(args, environ, io.Discard)
	return af, err
}

// A setting comes from the command line, else its environment variable,
// else the config file, else the flag's default.
func TestConfigPrecedence(t *testing.T) {
	path := writeConfigFile(t, `
client-addr: 10.1.1.1:7400
timeout: 40s
heartbeat: 4s
max-connections: 7
send-rate: 2.5
dev: true
join: [a:7946, "b:7946"]
`)
	env := []string{"ROLLCALL_TIMEOUT=30s", "ROLLCALL_HEARTBEAT=3s"}
	af, err := parseAgent(t, []string{"--config", path, "--heartbeat", "2s"}, env)
	if err != nil {
		t.Fatal(err)
	}
	if af.Node.Heartbeat != 2*time.Second {
		t.Errorf("heartbeat %v: the flag (2s) must win over env and file", af.Node.Heartbeat)
	}
	if af.Node.Timeout != 30*time.Second {
		t.Errorf("timeout %v: the environment (30s) must win over the file", af.Node.Timeout)
	}
	if af.Node.ClientAddr != "10.1.1.1:7400" || af.Node.MaxConnections != 7 || af.Node.SendRate != 2.5 || !af.Node.Dev {
		t.Errorf("file values not applied: %+v", af)
	}
	if af.Node.DrainTimeout != 10*time.Second || af.Node.HTTPAddr != "127.0.0.1:7401" {
		t.Errorf("defaults not kept: drain %v http %q", af.Node.DrainTimeout, af.Node.HTTPAddr)
	}
	if len(af.Gossip.Join) != 2 || af.Gossip.Join[1] != "b:7946" {
		t.Errorf("join from a YAML list: %q", af.Gossip.Join)
	}

	// ROLLCALL_CONFIG names the file; --config wins over it.
	af, err = parseAgent(t, nil, []string{"ROLLCALL_CONFIG=" + path})
	if err != nil || af.Node.ClientAddr != "10.1.1.1:7400" {
		t.Fatalf("ROLLCALL_CONFIG: %+v %v", af, err)
	}
	other := writeConfigFile(t, "client-addr: 10.2.2.2:7400\n")
	af, err = parseAgent(t, []string{"--config", other}, []string{"ROLLCALL_CONFIG=" + path})
	if err != nil || af.Node.ClientAddr != "10.2.2.2:7400" {
		t.Fatalf("--config over ROLLCALL_CONFIG: %+v %v", af, err)
	}
}

// ROLLCALL_HTTP_ADDR="" disables HTTP, over the file and the default.
func TestConfigEmptyEnvHonoured(t *testing.T) {
	af, err := parseAgent(t, nil, []string{"ROLLCALL_HTTP_ADDR="})
	if err != nil || af.Node.HTTPAddr != "" {
		t.Fatalf("empty ROLLCALL_HTTP_ADDR over the default: %q %v", af.Node.HTTPAddr, err)
	}
	path := writeConfigFile(t, "http-addr: 127.0.0.1:9\ngossip-addr: 127.0.0.1:8\n")
	af, err = parseAgent(t, []string{"--config", path}, []string{"ROLLCALL_HTTP_ADDR=", "ROLLCALL_GOSSIP_ADDR="})
	if err != nil || af.Node.HTTPAddr != "" || af.Gossip.BindAddr != "" {
		t.Fatalf("empty env over the file: http %q gossip %q %v", af.Node.HTTPAddr, af.Gossip.BindAddr, err)
	}
	// In the file, an empty or null value is empty too.
	path = writeConfigFile(t, "http-addr: \"\"\ngossip-addr:\n")
	af, err = parseAgent(t, []string{"--config", path}, nil)
	if err != nil || af.Node.HTTPAddr != "" || af.Gossip.BindAddr != "" {
		t.Fatalf("empty file values: http %q gossip %q %v", af.Node.HTTPAddr, af.Gossip.BindAddr, err)
	}
}

// A key that is not a flag is refused, naming the key and the file: a typo
// must not be silently ignored.
func TestConfigUnknownKeyRefused(t *testing.T) {
	for text, key := range map[string]string{
		"client-adr: 0.0.0.0:7400\n":            `"client-adr"`,
		"gossip:\n  addr: 0.0.0.0:7946\n":       `"gossip.addr"`,
		"print-config: true\n":                  `"print-config"`,
		"name: a\nfrobnicate: 3\n":              `"frobnicate"`,
		"config: /etc/rollcall/other.yaml\n":    `"config"`,
		"http-addr: x:1\nsecret_file: /tmp/s\n": `"secret_file"`,
	} {
		path := writeConfigFile(t, text)
		_, err := parseAgent(t, []string{"--config", path}, nil)
		if err == nil || !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), path) {
			t.Errorf("%q: want an error naming %s and %s, got %v", text, key, path, err)
		}
	}
	path := writeConfigFile(t, "client-adr: 0.0.0.0:7400\n")
	if _, err := parseAgent(t, []string{"--config", path}, nil); err == nil || !strings.Contains(err.Error(), `did you mean "client-addr"`) {
		t.Errorf("no suggestion: %v", err)
	}
	// A key of another subcommand is accepted (one file serves all) and
	// not applied to this one.
	path = writeConfigFile(t, "user: alice\nttl: 2h\nclient-addr: 10.0.0.1:7400\n")
	if af, err := parseAgent(t, []string{"--config", path}, nil); err != nil || af.Node.ClientAddr != "10.0.0.1:7400" {
		t.Errorf("other subcommands' keys: %v", err)
	}
}

// Every value must parse as its flag's type, whichever subcommand owns it.
func TestConfigBadValues(t *testing.T) {
	for text, want := range map[string]string{
		"timeout: fast\n":                "timeout",
		"max-connections: many\n":        "max-connections",
		"max-connections: [1, 2]\n":      "max-connections",
		"dev: maybe\n":                   "dev",
		"client-addr: {a: 1}\n":          "client-addr",
		"join: [[a, b]]\n":               "join",
		"ttl: soon\n":                    "ttl",
		"client-addr: [a\n":              "rollcall.yaml",
		"send-rate: 1.5.2\n":             "send-rate",
		"heartbeat: 2s\nheartbeat: 3s\n": "heartbeat",
	} {
		path := writeConfigFile(t, text)
		_, err := parseAgent(t, []string{"--config", path}, nil)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), path) {
			t.Errorf("%q: want an error naming %q and the file, got %v", text, want, err)
		}
	}
	if _, err := parseAgent(t, []string{"--config", filepath.Join(t.TempDir(), "missing.yaml")}, nil); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("missing file: %v", err)
	}
}

// Every subcommand with flags reads the same file and environment.
func TestConfigOtherSubcommands(t *testing.T) {
	secret := writeSecret(t)
	path := writeConfigFile(t, "secret-file: "+secret+"\nuser: carol\nclient-addr: 10.0.0.1:7400\n")
	var out bytes.Buffer
	t.Setenv("ROLLCALL_CONFIG", path)
	if err := runToken(t.Context(), nil, &out, io.Discard); err != nil {
		t.Fatalf("token from the config file: %v", err)
	}
	if strings.Count(out.String(), ".") != 2 {
		t.Fatalf("token %q", out.String())
	}
	fs, target, _ := membersFlagSet(io.Discard)
	if err := parseFlags(fs, []string{"--config", writeConfigFile(t, "http-addr: 10.9.9.9:7401\n")}, nil); err != nil || target.addr != "10.9.9.9:7401" {
		t.Fatalf("members http-addr from the file: %q %v", target.addr, err)
	}
}

// keyInExample matches an example config line giving a key, commented out
// or not ("# tls-cert: ..." documents a setting without setting it).
var keyInExample = regexp.MustCompile(`(?m)^#?\s*([a-z][a-z0-9-]*):`)

// deploy/rollcall.yaml documents every agent flag and is a valid
// configuration (its file paths replaced by files that exist here).
func TestExampleConfig(t *testing.T) {
	const example = "../../deploy/rollcall.yaml"
	text, err := os.ReadFile(example)
	if err != nil {
		t.Fatal(err)
	}
	inExample := map[string]bool{}
	for _, m := range keyInExample.FindAllStringSubmatch(string(text), -1) {
		inExample[m[1]] = true
	}
	fs := newAgentFlagSet()
	fs.VisitAll(func(f *flag.Flag) {
		if !inExample[f.Name] {
			t.Errorf("%s does not document --%s (%s)", example, f.Name, f.Usage)
		}
	})

	keyring := filepath.Join(t.TempDir(), "keyring")
	if err := os.WriteFile(keyring, []byte(base64.StdEncoding.EncodeToString(make([]byte, 32))+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"ROLLCALL_SECRET_FILE=" + writeSecret(t), "ROLLCALL_KEYRING_FILE=" + keyring}
	af, err := parseAgent(t, []string{"--config", example}, env)
	if err != nil {
		t.Fatalf("example config: %v", err)
	}
	if err := af.check(); err != nil {
		t.Fatalf("example config does not validate: %v", err)
	}
	if af.Node.Name != "gw-eu-1" || len(af.Gossip.Join) != 2 || af.LogFormat != "json" || af.Node.Dev {
		t.Fatalf("example values not applied: %+v", af)
	}
	var out bytes.Buffer
	t.Setenv("ROLLCALL_SECRET_FILE", env[0][len("ROLLCALL_SECRET_FILE="):])
	t.Setenv("ROLLCALL_KEYRING_FILE", keyring)
	if err := runValidateConfig(t.Context(), []string{example}, &out, io.Discard); err != nil || !strings.Contains(out.String(), "valid") {
		t.Fatalf("rollcall validate-config %s: %v %q", example, err, out.String())
	}
}

// validate-config makes the agent's own checks and exits non-zero.
func TestValidateConfig(t *testing.T) {
	secret := writeSecret(t)
	good := writeConfigFile(t, "secret-file: "+secret+"\ngossip-addr: \"\"\n")
	if err := runValidateConfig(t.Context(), []string{"--config", good}, io.Discard, io.Discard); err != nil {
		t.Fatalf("good config: %v", err)
	}
	for text, want := range map[string]string{
		"gossip-addr: \"\"\n": "--secret-file",
		"dev: true\ngossip-addr: \"\"\ngossip-profile: lam\n": "lam",
		"dev: true\nheartbeat: 10s\ntimeout: 5s\n":            "imeout",
		"dev: true\nlog-level: loud\n":                        "log-level",
		"dev: true\ngossip-key: c2hvcnQ=\n":                   "gossip-key",
		"dev: true\nsecret-file: /nonexistent/secret\n":       "/nonexistent/secret",
		"dev: true\nkeyring-file: /nonexistent/keyring\n":     "/nonexistent/keyring",
		"dev: true\ntimeotu: 5s\n":                            "timeotu",
	} {
		path := writeConfigFile(t, text)
		err := runValidateConfig(t.Context(), []string{path}, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: want an error about %q, got %v", text, want, err)
		}
	}
}

// A bad --gossip-profile is refused even when gossip is off.
func TestGossipProfileCheckedStandalone(t *testing.T) {
	// Accepted, the agent would run until the context ends.
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	err := runAgent(ctx, []string{"--dev", "--gossip-addr", "", "--gossip-profile", "lam", "--client-addr", "127.0.0.1:0", "--http-addr", ""}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "lam") {
		t.Fatalf("bad profile with --gossip-addr \"\": %v", err)
	}
}

// --gossip-batch comes from the command line or the config file; a
// negative window is refused before anything listens.
func TestGossipBatch(t *testing.T) {
	path := writeConfigFile(t, "gossip-batch: 3ms\n")
	af, _, _, err := loadAgentConfig([]string{"--config", path}, nil, io.Discard)
	if err != nil || af.Gossip.BatchDelay != 3*time.Millisecond {
		t.Fatalf("gossip-batch from the config file: %v, %v", af.Gossip.BatchDelay, err)
	}
	if af, _, _, err := loadAgentConfig(nil, nil, io.Discard); err != nil || af.Gossip.BatchDelay != gossip.DefaultConfig().BatchDelay {
		t.Fatalf("gossip-batch default: %v, %v", af.Gossip.BatchDelay, err)
	}
	af, _, _, err = loadAgentConfig([]string{"--dev", "--gossip-batch", "-1ms"}, nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if err := af.check(); err == nil || !strings.Contains(err.Error(), "--gossip-batch") {
		t.Fatalf("negative --gossip-batch: %v", err)
	}
}

// --peer-lease comes from the command line or the config file, apart from
// --timeout; a short one gets a shorter alive interval, and one that is not
// positive is refused before anything listens.
func TestPeerLease(t *testing.T) {
	af, _, _, err := loadAgentConfig([]string{"--dev", "--timeout", "7s"}, nil, io.Discard)
	if err != nil || af.Gossip.LeaseTimeout != gossip.DefaultConfig().LeaseTimeout || af.check() != nil {
		t.Fatalf("peer-lease default: %v, %v", af.Gossip.LeaseTimeout, err)
	}
	path := writeConfigFile(t, "peer-lease: 800ms\n")
	af, _, _, err = loadAgentConfig([]string{"--dev", "--config", path}, nil, io.Discard)
	if err != nil || af.Gossip.LeaseTimeout != 800*time.Millisecond {
		t.Fatalf("peer-lease from the config file: %v, %v", af.Gossip.LeaseTimeout, err)
	}
	if err := af.check(); err != nil {
		t.Fatalf("--peer-lease 800ms: %v", err)
	}
	if cfg, err := af.gossipConfig("gw1", zap.NewNop()); err != nil || cfg.Validate() != nil || cfg.AliveInterval >= 400*time.Millisecond {
		t.Fatalf("--peer-lease 800ms: alive interval %v (%v)", cfg.AliveInterval, err)
	}
	for _, bad := range []string{"-1s", "0s"} {
		af, _, _, err = loadAgentConfig([]string{"--dev", "--peer-lease", bad}, nil, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if err := af.check(); err == nil || !strings.Contains(err.Error(), "--peer-lease") {
			t.Fatalf("--peer-lease %s: %v", bad, err)
		}
	}
}

// --print-config shows the effective configuration as YAML a config file
// can hold, with the gossip key redacted and file paths shown.
func TestPrintConfigRedactsSecrets(t *testing.T) {
	key := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
	path := writeConfigFile(t, "timeout: 20s\nsecret-file: /etc/rollcall/secret\n")
	for _, tc := range []struct {
		args []string
		env  string
	}{
		{args: []string{"--gossip-key", key}},
		{env: key},
	} {
		t.Setenv("ROLLCALL_GOSSIP_KEY", tc.env)
		var out bytes.Buffer
		args := append([]string{"--config", path, "--heartbeat", "2s", "--print-config"}, tc.args...)
		if err := runAgent(t.Context(), args, &out, io.Discard); err != nil {
			t.Fatal(err)
		}
		text := out.String()
		if strings.Contains(text, key) || strings.Contains(text, key[:20]) {
			t.Fatalf("the gossip key is printed:\n%s", text)
		}
		for _, want := range []string{"gossip-key: <redacted>", "secret-file: /etc/rollcall/secret", "timeout: 20s", "heartbeat: 2s", "http-addr: 127.0.0.1:7401"} {
			if !strings.Contains(text, want) {
				t.Errorf("print-config lacks %q:\n%s", want, text)
			}
		}
		values, err := yaml.Parser().Unmarshal(out.Bytes())
		if err != nil {
			t.Fatalf("print-config is not YAML: %v\n%s", err, text)
		}
		fs := newAgentFlagSet()
		fs.VisitAll(func(f *flag.Flag) {
			if _, ok := values[f.Name]; !ok {
				t.Errorf("print-config lacks %s", f.Name)
			}
		})
		// The output, secrets put back, is a config file giving the same
		// configuration.
		delete(values, "gossip-key")
		b, _ := yaml.Parser().Marshal(values)
		again := writeConfigFile(t, string(b))
		var out2 bytes.Buffer
		if err := runAgent(t.Context(), []string{"--config", again, "--gossip-key", key, "--print-config"}, &out2, io.Discard); err != nil {
			t.Fatal(err)
		}
		if out2.String() != text {
			t.Errorf("print-config does not round-trip:\n%s\nvs\n%s", text, out2.String())
		}
	}
	for name, secret := range map[string]bool{"gossip-key": true, "admin-token": true, "token": true, "client-secret": true, "tls-key": true,
		"keyring-file": false, "secret-file": false, "admin-token-file": false, "keys": false, "name": false} {
		if isSecretFlag(name) != secret {
			t.Errorf("isSecretFlag(%q) = %v", name, !secret)
		}
	}
}

// Console logs carry colour codes only on a terminal, never into a file or
// a pipe.
func TestConsoleLogColourOnlyOnTerminal(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var buf bytes.Buffer
	for _, w := range []io.Writer{f, &buf} {
		log, _, err := newLogger("info", "console", w)
		if err != nil {
			t.Fatal(err)
		}
		log.Warn("hello", zap.String("k", "v"))
		_ = log.Sync()
	}
	logged, _ := os.ReadFile(f.Name())
	for _, text := range []string{string(logged), buf.String()} {
		if !strings.Contains(text, "WARN") || !strings.Contains(text, "hello") {
			t.Fatalf("log line missing: %q", text)
		}
		if strings.Contains(text, "\x1b[") {
			t.Fatalf("colour codes in a redirected log: %q", text)
		}
	}
	if isTerminal(f) || isTerminal(&buf) {
		t.Fatal("a file is taken for a terminal")
	}
	if null, err := os.Open(os.DevNull); err == nil {
		defer null.Close()
		if isTerminal(null) {
			t.Fatal("/dev/null is taken for a terminal")
		}
	}
}

// Outside --dev, gossip on an address other hosts reach needs a key or
// --gossip-insecure; the refusal names both ways out. Loopback needs
// neither.
func TestPlaintextGossipOnANetworkRefused(t *testing.T) {
	secret := writeSecret(t)
	keyFile := filepath.Join(t.TempDir(), "gossip.key")
	if err := os.WriteFile(keyFile, []byte(base64.StdEncoding.EncodeToString(make([]byte, 32))), 0o600); err != nil {
		t.Fatal(err)
	}
	base := "secret-file: " + secret + "\n"
	for text, ok := range map[string]bool{
		"gossip-addr: 0.0.0.0:7946\n":                                     false,
		"gossip-addr: 10.0.0.11:7946\n":                                   false,
		"gossip-addr: '[::]:7946'\n":                                      false,
		"gossip-addr: 10.0.0.11:7946\ngossip-insecure: true\n":            true,
		"gossip-addr: 10.0.0.11:7946\ngossip-key-file: " + keyFile + "\n": true,
		"gossip-addr: 10.0.0.11:7946\nkeyring-file: " + keyFile + "\n":    true,
		"gossip-addr: 10.0.0.11:7946\ndev: true\n":                        true,
		"gossip-addr: 127.0.0.1:7946\n":                                   true,
		"gossip-addr: '[::1]:7946'\n":                                     true,
		"gossip-addr: \"\"\n":                                             true,
	} {
		err := runValidateConfig(t.Context(), []string{writeConfigFile(t, base+text)}, io.Discard, io.Discard)
		switch {
		case ok && err != nil:
			t.Errorf("%q: %v", text, err)
		case !ok && err == nil:
			t.Errorf("%q: plaintext gossip on a network accepted", text)
		case !ok && (!strings.Contains(err.Error(), "--gossip-insecure") || !strings.Contains(err.Error(), "--gossip-key-file") ||
			!strings.Contains(err.Error(), "--keyring-file")):
			t.Errorf("%q: the error does not name both ways out: %v", text, err)
		}
	}
}

// The webhook flags: --webhook-url repeats (and takes commas), in a config
// file a YAML list; the events parse; URLs need a secret file, whose
// secrets reach the node's configuration.
func TestWebhookFlags(t *testing.T) {
	af, err := parseAgent(t, []string{"--webhook-url", "http://a/h", "--webhook-url", "https://b/h,http://c/h",
		"--webhook-events", "user.offline, user.online"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	w := af.Node.Webhook
	if strings.Join(w.URLs, " ") != "http://a/h https://b/h http://c/h" || w.Events.String() != "user.online,user.offline" {
		t.Fatalf("urls %v, events %v", w.URLs, w.Events)
	}
	path := writeConfigFile(t, "webhook-url: [http://a/h, http://b/h]\n")
	if af, err = parseAgent(t, []string{"--config", path}, nil); err != nil || len(af.Node.Webhook.URLs) != 2 {
		t.Fatalf("from the config file: %v, %v", af.Node.Webhook.URLs, err)
	}
	if _, err := parseAgent(t, []string{"--webhook-events", "user.deleted"}, nil); err == nil || !strings.Contains(err.Error(), "user.deleted") {
		t.Fatalf("unknown event: %v", err)
	}
	af, err = parseAgent(t, []string{"--dev", "--webhook-url", "http://a/h"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := af.nodeConfig(zap.NewNop()); err == nil || !strings.Contains(err.Error(), "--webhook-secret-file") {
		t.Fatalf("URLs without a secret: %v", err)
	}
	secrets := filepath.Join(t.TempDir(), "webhook-secret")
	if err := os.WriteFile(secrets, []byte("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	af.WebhookSecretFile = secrets
	cfg, err := af.nodeConfig(zap.NewNop())
	if err != nil || len(cfg.Webhook.Secrets) != 1 || len(cfg.Webhook.Secrets[0]) != 24 {
		t.Fatalf("secret file: %v", err)
	}
}
