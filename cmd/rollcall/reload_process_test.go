package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rollcall/rollcall/internal/testcerts"
	"github.com/rollcall/rollcall/internal/testkit"
	"github.com/rollcall/rollcall/node"
	"github.com/rollcall/rollcall/protocol"
)

// SIGHUP on a running agent re-reads its TLS certificate files and applies
// the limits of its config file: a new connection is served the new
// certificate, a session opened before keeps working, and the reload log
// names both parts.
func TestSIGHUPRotatesCertificateAndLimits(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs it")
	}
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "rollcall reload CA")
	caPool := x509.NewCertPool()
	if !caPool.AppendCertsFromPEM(mustRead(t, ca.WriteCA(t, dir, "ca.pem"))) {
		t.Fatal("CA PEM")
	}
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	install := func(name string) []byte {
		c, k := ca.Issue(t, name).Write(t, dir, name)
		for src, dst := range map[string]string{c: certFile, k: keyFile} {
			if err := os.WriteFile(dst, mustRead(t, src), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		block, _ := pem.Decode(mustRead(t, certFile))
		return block.Bytes
	}
	config := filepath.Join(dir, "rollcall.yaml")
	writeConfig := func(rate int) {
		// timeout: bob is silent from his hello to his last get, across
		// the reload; an hour keeps a loaded machine from expiring him.
		text := fmt.Sprintf("dev: true\nlog-format: json\ngossip-profile: local\ntimeout: 1h\ntls-cert: %s\ntls-key: %s\nrequest-rate: %d\n", certFile, keyFile, rate)
		if err := os.WriteFile(config, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	first := install("localhost")
	writeConfig(100)
	client := freeAddr(t)
	a := startLoggedAgent(t, testkit.BuildRollcall(t), "--config", config, "--name", "gw", "--client-addr", client,
		"--http-addr", freeAddr(t), "--gossip-addr", freeAddr(t))
	waitDial(t, client)
	dialTLS := func() (*testkit.LineClient, []byte) {
		t.Helper()
		conn, err := tls.Dial("tcp", client, &tls.Config{RootCAs: caPool, ServerName: "localhost"})
		if err != nil {
			t.Fatal(err)
		}
		return testkit.NewLineClient(t, conn, "bob", fmt.Sprintf("d%d", time.Now().UnixNano()), nil), conn.ConnectionState().PeerCertificates[0].Raw
	}
	bob, served := dialTLS()
	if !bytes.Equal(served, first) {
		t.Fatal("the agent did not serve its first certificate")
	}

	second := install("localhost")
	writeConfig(400)
	a.signal(t, syscall.SIGHUP)
	a.waitLog(t, `"reload done"`)
	log := a.log.String()
	for _, want := range []string{`"part":"tls"`, `"part":"limits"`, `"errors":0`} {
		if !strings.Contains(log, want) {
			t.Errorf("the reload log lacks %s", want)
		}
	}
	if _, served := dialTLS(); !bytes.Equal(served, second) {
		t.Error("a connection after SIGHUP was not served the new certificate")
	}
	bob.Send(map[string]any{"op": "get", "users": []string{"bob"}, "id": 7})
	if p := bob.Expect("presence", replyWithin); p["id"] != float64(7) {
		t.Fatalf("the session opened before the reload: %v", p)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// SIGHUP re-reads the token secret file: after the operator replaces the
// key, a token signed with the old one is refused at hello and one signed
// with the new one is welcomed, while a session opened before stays.
func TestSIGHUPReloadsTokenKeys(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs it")
	}
	secret := filepath.Join(t.TempDir(), "secret")
	oldKey, newKey := []byte(strings.Repeat("o", 32)), []byte(strings.Repeat("n", 32))
	if err := os.WriteFile(secret, oldKey, 0o600); err != nil {
		t.Fatal(err)
	}
	client := freeAddr(t)
	// bob says nothing from his hello to his last get, across the reload:
	// a session timeout of an hour keeps a loaded machine's slow steps
	// (the reload, the dials, the waits for the log) from expiring him.
	a := startLoggedAgent(t, testkit.BuildRollcall(t), "--name", "gw", "--secret-file", secret, "--client-addr", client,
		"--http-addr", freeAddr(t), "--gossip-addr", "", "--log-format", "json", "--timeout", "1h")
	waitDial(t, client)
	token := func(key []byte, user string) string {
		tok, err := node.NewToken(key, user, time.Hour, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	dial := func() net.Conn {
		conn, err := net.Dial("tcp", client)
		if err != nil {
			t.Fatal(err)
		}
		return conn
	}
	bob := testkit.NewLineClient(t, dial(), "bob", "laptop", map[string]any{"token": token(oldKey, "bob")})

	if err := os.WriteFile(secret, newKey, 0o600); err != nil {
		t.Fatal(err)
	}
	a.signal(t, syscall.SIGHUP)
	a.waitLog(t, `"reload done"`)
	if log := a.log.String(); !strings.Contains(log, `"part":"token-keys"`) || !strings.Contains(log, `"errors":0`) {
		t.Fatalf("the reload log does not show the token keys reloaded:\n%s", log)
	}
	stale := dial()
	defer stale.Close()
	hello, _ := protocol.Marshal(protocol.Request{Op: protocol.OpHello, User: "carol", Device: "d", Token: token(oldKey, "carol")})
	if _, err := stale.Write(hello); err != nil {
		t.Fatal(err)
	}
	stale.SetReadDeadline(time.Now().Add(10 * time.Second)) //nolint:errcheck // a missed deadline fails the read below
	var reply protocol.ErrorFrame
	if line, err := protocol.NewReader(stale, 4<<10, protocol.MaxLineBytes).ReadLine(); err != nil || protocol.Unmarshal(line, &reply) != nil || reply.Code != protocol.CodeAuthFailed {
		t.Fatalf("a token of the replaced key: %s %v", line, err)
	}
	testkit.NewLineClient(t, dial(), "dave", "d", map[string]any{"token": token(newKey, "dave")})
	bob.Send(map[string]any{"op": "get", "users": []string{"bob"}, "id": 3})
	if p := bob.Expect("presence", replyWithin); p["id"] != float64(3) {
		t.Fatalf("the session opened before the reload: %v", p)
	}
}
