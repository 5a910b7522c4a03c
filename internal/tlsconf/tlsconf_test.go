package tlsconf

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rollcall/rollcall/internal/testcerts"
)

func write(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// served returns the leaf a handshake with s's configuration would get.
func served(t *testing.T, s *Server) []byte {
	t.Helper()
	c, err := s.Config().GetConfigForClient(&tls.ClientHelloInfo{})
	if err != nil {
		t.Fatal(err)
	}
	return c.Certificates[0].Certificate[0]
}

func TestServerReload(t *testing.T) {
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "ca")
	certFile, keyFile := ca.Issue(t, "one").Write(t, dir, "gw")
	s, err := NewServer(ServerFiles{CertFile: certFile, KeyFile: keyFile})
	if err != nil {
		t.Fatal(err)
	}
	if c := s.Config(); c.MinVersion != tls.VersionTLS12 {
		t.Fatalf("min version %x", c.MinVersion)
	}
	first := served(t, s)
	if info := s.Info(); !strings.Contains(info.String(), "CN=one") || info.ClientCAs != 0 {
		t.Fatalf("info %v", info)
	}

	if changed, err := s.Reload(); changed || err != nil {
		t.Fatalf("reload of unchanged files: %v %v", changed, err)
	}

	// A key that does not match the certificate, an expired certificate, a
	// missing file: each reload fails and the first certificate stays.
	two := ca.Issue(t, "two")
	write(t, certFile, two.CertPEM)
	expired := ca.IssueExpired(t, "old")
	for _, step := range []struct {
		name    string
		prepare func()
	}{
		{"mismatched key", func() {}},
		{"expired", func() { write(t, certFile, expired.CertPEM); write(t, keyFile, expired.KeyPEM) }},
		{"missing key", func() { os.Remove(keyFile) }},
	} {
		name := step.name
		step.prepare()
		changed, err := s.Reload()
		if err == nil || changed || !strings.Contains(err.Error(), "still serving") || !strings.Contains(err.Error(), "CN=one") {
			t.Fatalf("%s: reload %v %v", name, changed, err)
		}
		if name == "expired" && !strings.Contains(err.Error(), "expired") {
			t.Fatalf("expired: %v", err)
		}
		if string(served(t, s)) != string(first) {
			t.Fatalf("%s: a failed reload changed the certificate", name)
		}
	}

	write(t, certFile, two.CertPEM)
	write(t, keyFile, two.KeyPEM)
	if changed, err := s.Reload(); !changed || err != nil {
		t.Fatalf("reload of a new pair: %v %v", changed, err)
	}
	if string(served(t, s)) == string(first) || !strings.Contains(s.Info().Subject, "two") {
		t.Fatal("reload did not swap the certificate")
	}

	// Adding a client CA is a change too.
	caFile := ca.WriteCA(t, dir, "clients.pem")
	s2, err := NewServer(ServerFiles{CertFile: certFile, KeyFile: keyFile, ClientCAFile: caFile})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := s2.Config().GetConfigForClient(&tls.ClientHelloInfo{})
	if c.ClientAuth != tls.RequireAndVerifyClientCert || c.ClientCAs == nil || s2.Info().ClientCAs != 1 {
		t.Fatalf("client CA config %+v", c)
	}
	write(t, caFile, append(ca.PEM, testcerts.NewCA(t, "second").PEM...))
	if changed, err := s2.Reload(); !changed || err != nil || s2.Info().ClientCAs != 2 {
		t.Fatalf("reload of a client CA file: %v %v %v", changed, err, s2.Info())
	}
	write(t, caFile, []byte("not PEM"))
	if _, err := s2.Reload(); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Fatalf("client CA file without certificates: %v", err)
	}
}

func TestNewServerErrors(t *testing.T) {
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "ca")
	certFile, keyFile := ca.Issue(t, "gw").Write(t, dir, "gw")
	if _, err := NewServer(ServerFiles{CertFile: certFile}); err == nil {
		t.Fatal("no key file accepted")
	}
	if _, err := NewServer(ServerFiles{CertFile: certFile, KeyFile: filepath.Join(dir, "nope")}); err == nil {
		t.Fatal("missing key file accepted")
	}
	late := func() time.Time { return time.Now().Add(48 * time.Hour) }
	if _, err := newServer(ServerFiles{CertFile: certFile, KeyFile: keyFile}, late); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("expired certificate accepted: %v", err)
	}
}

func TestClientFiles(t *testing.T) {
	if c, err := (ClientFiles{}).Config(); c != nil || err != nil {
		t.Fatalf("zero value: %v %v", c, err)
	}
	c, err := ClientFiles{Enabled: true}.Config()
	if err != nil || c.RootCAs != nil || c.MinVersion != tls.VersionTLS12 {
		t.Fatalf("--tls: %+v %v", c, err)
	}
	if c, err := (ClientFiles{ServerName: "gw.example"}).Config(); err != nil || c == nil || c.ServerName != "gw.example" {
		t.Fatalf("--tls-server-name alone: %v %v", c, err)
	}
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "ca")
	caFile := ca.WriteCA(t, dir, "ca.pem")
	certFile, keyFile := ca.Issue(t, "alice").Write(t, dir, "alice")
	c, err = ClientFiles{CAFile: caFile, CertFile: certFile, KeyFile: keyFile}.Config()
	if err != nil || c.RootCAs == nil || len(c.Certificates) != 1 {
		t.Fatalf("CA and client certificate: %+v %v", c, err)
	}
	if _, err := (ClientFiles{CertFile: certFile}).Config(); err == nil {
		t.Fatal("a client certificate without its key accepted")
	}
	if _, err := (ClientFiles{CAFile: keyFile}).Config(); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Fatalf("a CA file without certificates: %v", err)
	}
}
