package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/rollcall/rollcall/gossip"
	"github.com/rollcall/rollcall/internal/testcerts"
	"github.com/rollcall/rollcall/internal/testkit"
	"github.com/rollcall/rollcall/internal/tlsconf"
	"github.com/rollcall/rollcall/node"
)

// tlsAgent is an in-process agent serving TLS on both ports with an admin
// token, in a one-member cluster.
type tlsAgent struct {
	ca                            *testcerts.CA
	dir, caFile, tokenFile        string
	secret                        string
	client, http                  string
	clientCertFile, clientKeyFile string // signed by ca, for mutual TLS
	done                          chan error
}

// startTLSAgent starts it; mutual makes it require client certificates
// signed by its CA.
func startTLSAgent(t *testing.T, mutual bool) *tlsAgent {
	t.Helper()
	a := &tlsAgent{ca: testcerts.NewCA(t, "rollcall test CA"), dir: t.TempDir(), client: freeAddr(t), http: freeAddr(t), done: make(chan error, 1)}
	certFile, keyFile := a.ca.Issue(t, "gw1").Write(t, a.dir, "gw1")
	a.clientCertFile, a.clientKeyFile = a.ca.Issue(t, "operator").Write(t, a.dir, "operator")
	a.caFile = a.ca.WriteCA(t, a.dir, "ca.pem")
	a.tokenFile, a.secret = writeAdminToken(t), writeSecret(t)
	args := []string{"--name", "gw1", "--client-addr", a.client, "--http-addr", a.http,
		"--gossip-addr", freeAddr(t), "--gossip-profile", "local", "--secret-file", a.secret,
		"--tls-cert", certFile, "--tls-key", keyFile, "--admin-token-file", a.tokenFile,
		"--log-level", "error"}
	if mutual {
		args = append(args, "--tls-client-ca", a.caFile)
	}
	ctx, stop := context.WithCancel(t.Context())
	go func() { a.done <- runAgent(ctx, args, io.Discard, io.Discard) }()
	t.Cleanup(func() {
		stop()
		if err := <-a.done; err != nil {
			t.Errorf("agent: %v", err)
		}
	})
	waitDial(t, a.client)
	return a
}

func (a *tlsAgent) token(t *testing.T, user string) string {
	t.Helper()
	var out bytes.Buffer
	if err := runToken(t.Context(), []string{"--secret-file", a.secret, "--user", user}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(out.String())
}

// connectOnce runs `rollcall connect` with args on input and returns its
// output and error once it exits.
func connectOnce(t *testing.T, args []string, input string) (string, error) {
	t.Helper()
	out := &syncBuffer{}
	err := connectClient(t.Context(), args, strings.NewReader(input), out, io.Discard)
	return out.String(), err
}

// TestConnectOverTLS: `rollcall connect --tls-ca` against an agent serving
// TLS, and the ways it is refused.
func TestConnectOverTLS(t *testing.T) {
	a := startTLSAgent(t, false)
	base := []string{"--addr", a.client, "--user", "alice", "--device", "phone", "--token", a.token(t, "alice")}

	out, err := connectOnce(t, append(base, "--tls-ca", a.caFile), "get alice\n")
	if err != nil || !strings.Contains(out, "connected to gw1 as alice/phone") || !strings.Contains(out, "alice: available") {
		t.Fatalf("connect --tls-ca: %v\n%s", err, out)
	}
	other := testcerts.NewCA(t, "another CA").WriteCA(t, t.TempDir(), "other.pem")
	if out, err := connectOnce(t, append(base, "--tls-ca", other), ""); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("connect trusting another CA: %v\n%s", err, out)
	}
	if _, err := connectOnce(t, append(base, "--tls"), ""); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("connect --tls (system roots) to a private CA's certificate: %v", err)
	}
	if _, err := connectOnce(t, append(base, "--tls-ca", a.caFile, "--tls-server-name", "gw.example"), ""); err == nil ||
		!strings.Contains(err.Error(), "gw.example") {
		t.Fatalf("connect with a server name the certificate lacks: %v", err)
	}
	if out, err := connectOnce(t, base, ""); err == nil || !strings.Contains(err.Error(), "--tls") {
		t.Fatalf("plain connect to a TLS agent: %v\n%s", err, out)
	}
}

func TestConnectMutualTLS(t *testing.T) {
	a := startTLSAgent(t, true)
	base := []string{"--addr", a.client, "--user", "alice", "--token", a.token(t, "alice"), "--tls-ca", a.caFile}
	if out, err := connectOnce(t, base, ""); err == nil {
		t.Fatalf("connect without a client certificate to a mutual-TLS agent: %s", out)
	}
	out, err := connectOnce(t, append(base, "--tls-cert", a.clientCertFile, "--tls-key", a.clientKeyFile), "")
	if err != nil || !strings.Contains(out, "connected to gw1 as alice") {
		t.Fatalf("connect with a client certificate: %v\n%s", err, out)
	}
	// The HTTP port requires the certificate too.
	members := []string{"--http-addr", a.http, "--tls-ca", a.caFile, "--admin-token-file", a.tokenFile}
	if err := runMembers(t.Context(), members, io.Discard, io.Discard); err == nil {
		t.Fatal("members without a client certificate to a mutual-TLS agent")
	}
	var table bytes.Buffer
	if err := runMembers(t.Context(), append(members, "--tls-cert", a.clientCertFile, "--tls-key", a.clientKeyFile), &table, io.Discard); err != nil ||
		!strings.Contains(table.String(), "gw1 (self)") {
		t.Fatalf("members with a client certificate: %v\n%s", err, table.String())
	}
}

// TestAdminToolsOverTLS: members, keys and leave over HTTPS, with and
// without the admin token.
func TestAdminToolsOverTLS(t *testing.T) {
	a := startTLSAgent(t, false)
	flags := []string{"--http-addr", a.http, "--tls-ca", a.caFile}
	withToken := append(flags[:len(flags):len(flags)], "--admin-token-file", a.tokenFile)

	if err := runMembers(t.Context(), flags, io.Discard, io.Discard); err == nil ||
		!strings.Contains(err.Error(), "401") || !strings.Contains(err.Error(), "--admin-token-file") {
		t.Fatalf("members without the admin token: %v", err)
	}
	if err := runMembers(t.Context(), []string{"--http-addr", a.http, "--admin-token-file", a.tokenFile}, io.Discard, io.Discard); err == nil ||
		!strings.Contains(err.Error(), "the agent speaks TLS") {
		t.Fatalf("members over plain HTTP to a TLS agent: %v", err)
	}
	var out bytes.Buffer
	if err := runMembers(t.Context(), withToken, &out, io.Discard); err != nil || !strings.Contains(out.String(), "gw1 (self)") {
		t.Fatalf("members: %v\n%s", err, out.String())
	}
	out.Reset()
	if err := runKeys(t.Context(), append([]string{"list"}, withToken...), &out, io.Discard); err != nil ||
		!strings.Contains(out.String(), "gossip is not encrypted") {
		t.Fatalf("keys list: %v\n%s", err, out.String())
	}
	if err := runKeys(t.Context(), append([]string{"list"}, flags...), io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("keys list without the admin token: %v", err)
	}
	if err := runLeave(t.Context(), flags, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("leave without the admin token: %v", err)
	}
	if err := runLeave(t.Context(), withToken, io.Discard, io.Discard); err != nil {
		t.Fatalf("leave: %v", err)
	}
	select {
	case err := <-a.done:
		a.done <- err // for the cleanup
	case <-time.After(15 * time.Second):
		t.Fatal("the agent did not exit after leave")
	}
}

// TestGossipKeyNeverShown runs an agent process with an encrypted keyring,
// rotates its key with `rollcall keys`, and checks that neither key appears
// in any answer, any command's output or the agent's debug log: only their
// ids do.
func TestGossipKeyNeverShown(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs an agent process")
	}
	bin := testkit.BuildRollcall(t)
	dir := t.TempDir()
	oldKey := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0x5a}, 32))
	newKey := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0xa5}, 32))
	keyFile := filepath.Join(dir, "gossip.key")
	if err := os.WriteFile(keyFile, []byte(oldKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tokenFile := writeAdminToken(t)
	httpAddr, clientAddr := freeAddr(t), freeAddr(t)
	var log syncBuffer
	cmd := exec.Command(bin, "agent", "--name", "gw1", "--dev", "--client-addr", clientAddr, "--http-addr", httpAddr,
		"--gossip-addr", freeAddr(t), "--gossip-profile", "local", "--gossip-key-file", keyFile,
		"--admin-token-file", tokenFile, "--log-level", "debug")
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	waitDial(t, clientAddr)

	var shown bytes.Buffer
	run := func(args ...string) {
		t.Helper()
		var out bytes.Buffer
		if err := runKeys(t.Context(), append(args, "--http-addr", httpAddr, "--admin-token-file", tokenFile), &out, io.Discard); err != nil {
			t.Fatalf("keys %v: %v", args, err)
		}
		shown.Write(out.Bytes())
	}
	raw := func() string {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), "GET", "http://"+httpAddr+"/v1/keys", nil)
		req.Header.Set("Authorization", "Bearer "+testAdminToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		shown.Write(b)
		return string(b)
	}
	id := func(k string) string {
		b, _ := base64.StdEncoding.DecodeString(k)
		return gossip.KeyID(b)
	}

	if body := raw(); !strings.Contains(body, fmt.Sprintf(`"id":"%s","primary":true`, id(oldKey))) {
		t.Fatalf("GET /v1/keys: %s", body)
	}
	run("list")
	run("install", newKey)
	run("use", newKey)
	if body := raw(); !strings.Contains(body, fmt.Sprintf(`"id":"%s","primary":true`, id(newKey))) ||
		!strings.Contains(body, fmt.Sprintf(`"id":"%s","primary":false`, id(oldKey))) {
		t.Fatalf("GET /v1/keys after use: %s", body)
	}
	run("remove", oldKey)
	run("list")
	if s := shown.String(); !strings.Contains(s, id(newKey)+"  (primary)") || strings.Count(s, id(oldKey)) < 3 {
		t.Fatalf("keys output:\n%s", s)
	}

	var idOut bytes.Buffer
	if err := runKeys(t.Context(), []string{"id", newKey}, &idOut, io.Discard); err != nil || strings.TrimSpace(idOut.String()) != id(newKey) {
		t.Fatalf("keys id: %v %q", err, idOut.String())
	}
	_ = cmd.Process.Signal(os.Interrupt)
	_ = cmd.Wait()
	for _, k := range []string{oldKey, newKey} {
		if strings.Contains(shown.String(), k) {
			t.Errorf("a gossip key was shown:\n%s", shown.String())
		}
		if strings.Contains(log.String(), k) {
			t.Errorf("a gossip key was logged:\n%s", log.String())
		}
	}
	if !strings.Contains(log.String(), "keyring") && !strings.Contains(log.String(), "gossip started") {
		t.Fatalf("the agent's log is not what this test reads:\n%s", log.String())
	}
}

func TestAgentTLSAndTokenFlags(t *testing.T) {
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "ca")
	certFile, keyFile := ca.Issue(t, "gw").Write(t, dir, "gw")
	for _, tc := range []struct {
		name string
		af   agentConfig
		want string
	}{
		{"key without certificate", agentConfig{TLS: tlsconf.ServerFiles{KeyFile: keyFile}}, "need --tls-cert"},
		{"client CA without certificate", agentConfig{TLS: tlsconf.ServerFiles{ClientCAFile: certFile}}, "need --tls-cert"},
		{"certificate without key", agentConfig{TLS: tlsconf.ServerFiles{CertFile: certFile}}, "needs --tls-key"},
		{"key that is not a key", agentConfig{TLS: tlsconf.ServerFiles{CertFile: certFile, KeyFile: certFile}}, "tls"},
	} {
		if _, err := tc.af.tlsServer(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	if s, err := (&agentConfig{}).tlsServer(); s != nil || err != nil {
		t.Fatalf("no TLS flags: %v %v", s, err)
	}
	if s, err := (&agentConfig{TLS: tlsconf.ServerFiles{CertFile: certFile, KeyFile: keyFile}}).tlsServer(); s == nil || err != nil {
		t.Fatalf("certificate and key: %v", err)
	}

	short := filepath.Join(dir, "short-token")
	if err := os.WriteFile(short, []byte("too short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	af := testAgentConfig()
	af.Node.Dev, af.AdminTokenFile = true, short
	if _, err := af.nodeConfig(zap.NewNop()); err == nil || !strings.Contains(err.Error(), "--admin-token-file") {
		t.Fatalf("a short admin token: %v", err)
	}
	af.AdminTokenFile = writeAdminToken(t)
	if cfg, err := af.nodeConfig(zap.NewNop()); err != nil || string(cfg.AdminToken) != testAdminToken {
		t.Fatalf("admin token %q: %v", cfg.AdminToken, err)
	}

	keyPath := filepath.Join(dir, "gossip.key")
	if err := os.WriteFile(keyPath, []byte("not base64!\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	n, err := node.New(node.Config{Name: "n", Dev: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, keys := range []agentConfig{
		{GossipKeyFile: keyPath, GossipKey: "x"},
		{GossipKeyFile: keyPath},
		{GossipKeyFile: filepath.Join(dir, "missing")},
	} {
		ac := defaultAgentConfig()
		ac.Gossip.BindAddr = "127.0.0.1:0"
		ac.GossipKey, ac.GossipKeyFile = keys.GossipKey, keys.GossipKeyFile
		if _, _, err := startCluster(t.Context(), &ac, n, zap.NewNop(), &clusterAPI{}); err == nil || !strings.Contains(err.Error(), "gossip-key") {
			t.Errorf("%+v: %v", keys, err)
		}
	}
}
