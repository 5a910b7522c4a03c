package main

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/rollcall/rollcall/auth"
)

// keyPair writes priv's PKCS#8 PEM and its public key's PEM (without a
// kid header) and returns their paths.
func keyPair(t *testing.T, name string, priv crypto.Signer) (privFile, pubFile string) {
	t.Helper()
	dir := t.TempDir()
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	pubDER, err := x509.MarshalPKIXPublicKey(priv.Public())
	if err != nil {
		t.Fatal(err)
	}
	privFile, pubFile = filepath.Join(dir, name+".key"), filepath.Join(dir, name+".pub")
	os.WriteFile(privFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600)
	os.WriteFile(pubFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o600)
	return privFile, pubFile
}

func mintCmd(t *testing.T, args ...string) string {
	t.Helper()
	var out bytes.Buffer
	if err := runToken(t.Context(), args, &out, io.Discard); err != nil {
		t.Fatalf("rollcall token %q: %v", args, err)
	}
	return strings.TrimSpace(out.String())
}

// TestTokenCommandKeys mints tokens with RSA, EC and Ed25519 private keys
// and every grant flag; the agent's verifier over the public keys accepts
// them with the grants asked for.
func TestTokenCommandKeys(t *testing.T) {
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	_, edKey, _ := ed25519.GenerateKey(rand.Reader)
	for _, tc := range []struct {
		name string
		key  crypto.Signer
		alg  string
	}{{"rsa", rsaKey, "RS256"}, {"ec", ecKey, "ES256"}, {"ed", edKey, "EdDSA"}} {
		privFile, pubFile := keyPair(t, tc.name, tc.key)
		v, err := auth.NewVerifier(auth.Source{KeyFiles: []string{pubFile}}, auth.Options{Audience: "rollcall", Issuer: "https://id.example"})
		if err != nil {
			t.Fatal(err)
		}
		tok := mintCmd(t, "--key", privFile, "--user", "alice", "--ttl", "10m", "--aud", "rollcall", "--iss", "https://id.example",
			"--read", "user:bob, group:eng", "--join", "eng", "--send", "*", "--backend")
		header := decodeSegment(t, tok, 0)
		if header["alg"] != tc.alg || header["kid"] == "" {
			t.Fatalf("%s: header %v", tc.name, header)
		}
		id, err := v.Verify(tok, time.Now())
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		g := id.Grants
		if id.User != "alice" || time.Until(id.Expires) > 10*time.Minute || !g.MayReadGroup("eng") || !g.MayJoin("eng") || g.MayJoin("ops") ||
			!g.MaySend("anyone", nil) || !g.Backend() {
			t.Fatalf("%s: identity %+v grants %+v", tc.name, id, g.Claim())
		}
		// --kid names the key explicitly.
		if h := decodeSegment(t, mintCmd(t, "--key", privFile, "--user", "alice", "--kid", "2026-12"), 0); h["kid"] != "2026-12" {
			t.Fatalf("%s: --kid: %v", tc.name, h)
		}
	}
	// A token without grant flags carries no rollcall claim: the defaults.
	secret := writeSecret(t)
	if claims := decodeSegment(t, mintCmd(t, "--secret-file", secret, "--user", "alice"), 1); claims["rollcall"] != nil || claims["sub"] != "alice" {
		t.Fatalf("claims %v", claims)
	}
	if h := decodeSegment(t, mintCmd(t, "--secret-file", secret, "--user", "alice", "--kid", "s1"), 0); h["kid"] != "s1" || h["alg"] != "HS256" {
		t.Fatalf("HS256 with --kid: %v", h)
	}
	privFile, pubFile := keyPair(t, "ed", edKey)
	for _, args := range [][]string{
		{"--user", "alice"},
		{"--secret-file", secret, "--key", privFile, "--user", "alice"},
		{"--key", pubFile, "--user", "alice"},
		{"--key", privFile, "--user", "alice", "--read", "bob"},
		{"--key", privFile, "--user", "alice", "--ttl", "-1m"},
	} {
		if err := runToken(t.Context(), args, io.Discard, io.Discard); err == nil {
			t.Errorf("rollcall token %q accepted", args)
		}
	}
}

// decodeSegment returns the JSON of a token's header (0) or claims (1).
func decodeSegment(t *testing.T, tok string, i int) map[string]any {
	t.Helper()
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		t.Fatalf("not a JWT: %q", tok)
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[i])
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestAgentTokenFlags: --token-keys, --token-audience, --token-issuer,
// --token-leeway and --secret-kid build the node's verifier.
func TestAgentTokenFlags(t *testing.T) {
	_, edKey, _ := ed25519.GenerateKey(rand.Reader)
	_, pubFile := keyPair(t, "ed", edKey)
	base := testAgentConfig()
	af := base
	af.TokenSource = auth.Source{SecretFile: writeSecret(t), SecretKeyID: "s1", KeyFiles: splitList(pubFile + ", ")}
	af.TokenOptions = auth.Options{Audience: "rollcall", Issuer: "https://id.example", Leeway: 0}
	cfg, err := af.nodeConfig(zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	v := cfg.TokenVerifier
	if v.Keys().Len() != 2 || v.Options().Audience != "rollcall" || v.Options().Issuer != "https://id.example" || v.Leeway() != 0 {
		t.Fatalf("verifier keys %v options %+v leeway %v", v.Keys().Keys(), v.Options(), v.Leeway())
	}
	for name, mut := range map[string]func(*agentConfig){
		"secret-kid without secret": func(a *agentConfig) {
			a.TokenSource = auth.Source{SecretKeyID: "s1", KeyFiles: []string{pubFile}}
		},
		"missing key file": func(a *agentConfig) { a.TokenSource.KeyFiles = []string{filepath.Join(t.TempDir(), "nope.pem")} },
		"a private key": func(a *agentConfig) {
			priv, _ := keyPair(t, "x", edKey)
			a.TokenSource.KeyFiles = []string{priv}
		},
	} {
		af := base
		mut(&af)
		if _, err := af.nodeConfig(zap.NewNop()); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// --token-keys alone is enough (no --secret-file).
	af = base
	af.TokenSource.KeyFiles = []string{pubFile}
	af.TokenOptions.Leeway = 30 * time.Second
	if cfg, err := af.nodeConfig(zap.NewNop()); err != nil || cfg.TokenVerifier.Keys().Len() != 1 || cfg.TokenVerifier.Leeway() != 30*time.Second {
		t.Fatalf("--token-keys alone: %v", err)
	}
}

// TestAgentWithPublicKeys runs the agent with an Ed25519 public key and an
// audience; a client with a token minted by `rollcall token --key` connects.
func TestAgentWithPublicKeys(t *testing.T) {
	_, edKey, _ := ed25519.GenerateKey(rand.Reader)
	privFile, pubFile := keyPair(t, "ed", edKey)
	addr := freeAddr(t)
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	go runAgent(ctx, []string{"--name", "gw", "--client-addr", addr, "--http-addr", "", "--gossip-addr", "",
		"--token-keys", pubFile, "--token-audience", "rollcall", "--log-level", "error"}, io.Discard, io.Discard)
	waitDial(t, addr)
	out := &syncBuffer{}
	tok := mintCmd(t, "--key", privFile, "--user", "alice", "--aud", "rollcall")
	if err := connectClient(t.Context(), []string{"--addr", addr, "--user", "alice", "--token", tok}, strings.NewReader("bye\n"), out, io.Discard); err != nil {
		t.Fatalf("connect: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "connected to gw as alice") {
		t.Fatalf("output %s", out.String())
	}
	noAud := mintCmd(t, "--key", privFile, "--user", "alice")
	err := connectClient(t.Context(), []string{"--addr", addr, "--user", "alice", "--token", noAud}, strings.NewReader(""), out, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "auth_failed") {
		t.Fatalf("a token without the audience: %v", err)
	}
}
