package node

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rollcall/rollcall/internal/testcerts"
	"github.com/rollcall/rollcall/internal/tlsconf"
	"github.com/rollcall/rollcall/protocol"
)

// tlsFixture is a CA, a gateway certificate it signed, and the files a
// tlsconf.Server reads them from.
type tlsFixture struct {
	ca    *testcerts.CA
	dir   string
	files tlsconf.ServerFiles
}

func newTLSFixture(t *testing.T) *tlsFixture {
	t.Helper()
	f := &tlsFixture{ca: testcerts.NewCA(t, "gateway CA"), dir: t.TempDir()}
	f.files.CertFile, f.files.KeyFile = f.ca.Issue(t, "gw").Write(t, f.dir, "gw")
	return f
}

// start runs a node serving TLS from the fixture's files.
func (f *tlsFixture) start(t *testing.T, mut func(*Config)) (*Node, *tlsconf.Server) {
	t.Helper()
	srv, err := tlsconf.NewServer(f.files)
	if err != nil {
		t.Fatal(err)
	}
	n := newTestNode(t, func(c *Config) {
		c.TLS = srv.Config()
		if mut != nil {
			mut(c)
		}
	})
	return n, srv
}

// clientConfig trusts ca (nil: the system's roots).
func clientConfig(ca *testcerts.CA, certs ...tls.Certificate) *tls.Config {
	c := &tls.Config{ServerName: "localhost", Certificates: certs}
	if ca != nil {
		c.RootCAs = x509.NewCertPool()
		c.RootCAs.AddCert(ca.Cert)
	}
	return c
}

// dialTLS connects a test client over TLS and completes the handshake.
func dialTLS(t *testing.T, n *Node, config *tls.Config) (*client, error) {
	t.Helper()
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second}, Config: config}
	nc, err := d.Dial("tcp", n.ClientAddr().String())
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { nc.Close() })
	return newClient(t, nc), nil
}

// refused reports whether a TLS client that completed its side of the
// handshake is refused: its hello gets no welcome but a TLS error. (In TLS
// 1.3 the server checks the client's certificate after the client's
// handshake returns; the refusal arrives on the first read.)
func refused(c *client) error {
	c.nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c.nc, `{"op":"hello","user":"mallory"}`+"\n") //nolint:errcheck // the read below tells
	f, err := c.tryRecv(5 * time.Second)
	if err == nil {
		return errors.New("served: " + f.str("op"))
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return errors.New("neither served nor refused")
	}
	return nil
}

func TestTLSClientTrustingAnotherCAFails(t *testing.T) {
	f := newTLSFixture(t)
	n, _ := f.start(t, nil)

	other := testcerts.NewCA(t, "another CA")
	if _, err := dialTLS(t, n, clientConfig(other)); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a client trusting another CA completed the handshake: %v", err)
	}
	if _, err := dialTLS(t, n, clientConfig(nil)); err == nil {
		t.Fatal("a client trusting the system's roots accepted a certificate from a private CA")
	}
	waitFor(t, "the failed handshakes counted", func() bool { return n.Stats().TLSHandshakeFailures == 2 })

	c, err := dialTLS(t, n, clientConfig(f.ca))
	if err != nil {
		t.Fatalf("a client trusting the gateway's CA: %v", err)
	}
	if w := c.hello("alice", "phone"); w.str("gateway") != "n1" {
		t.Fatalf("welcome %v", w)
	}
	if st := c.nc.(*tls.Conn).ConnectionState(); st.Version < tls.VersionTLS12 {
		t.Fatalf("negotiated %x", st.Version)
	}
}

func TestTLSRefusesOldVersionsAndPlainClients(t *testing.T) {
	f := newTLSFixture(t)
	cert, err := tls.LoadX509KeyPair(f.files.CertFile, f.files.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	// Configurations that would allow TLS 1.0: the node raises them to 1.2.
	lax := &tls.Config{MinVersion: tls.VersionTLS10, Certificates: []tls.Certificate{cert}}
	perHandshake := &tls.Config{GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) { return lax, nil }}
	for name, config := range map[string]*tls.Config{"Certificates": lax, "GetConfigForClient": perHandshake} {
		n := newTestNode(t, func(c *Config) { c.TLS = config })
		old := clientConfig(f.ca)
		old.MinVersion, old.MaxVersion = tls.VersionTLS10, tls.VersionTLS11
		if _, err := dialTLS(t, n, old); err == nil {
			t.Fatalf("%s: TLS 1.1 accepted", name)
		}
		if _, err := dialTLS(t, n, clientConfig(f.ca)); err != nil {
			t.Fatalf("%s: TLS 1.2+ refused: %v", name, err)
		}
	}
	n, _ := f.start(t, nil)
	plain := dialAddr(t, n.ClientAddr().String()) // plain TCP to the TLS client port
	plain.sendRaw(`{"op":"hello","user":"alice"}`)
	if f, err := plain.tryRecv(5 * time.Second); err == nil {
		t.Fatalf("a plain-text hello on the TLS port was answered: %v", f)
	}
}

func TestMutualTLS(t *testing.T) {
	f := newTLSFixture(t)
	f.files.ClientCAFile = f.ca.WriteCA(t, f.dir, "clients.pem")
	n, _ := f.start(t, nil)
	pair := func(ca *testcerts.CA, name string) tls.Certificate {
		p := ca.Issue(t, name)
		cert, err := tls.X509KeyPair(p.CertPEM, p.KeyPEM)
		if err != nil {
			t.Fatal(err)
		}
		return cert
	}

	t.Run("no client certificate", func(t *testing.T) {
		c, err := dialTLS(t, n, clientConfig(f.ca))
		if err == nil {
			err = refused(c)
		} else {
			err = nil // refused within the handshake
		}
		if err != nil {
			t.Fatalf("a client without a certificate: %v", err)
		}
	})
	t.Run("certificate from another CA", func(t *testing.T) {
		c, err := dialTLS(t, n, clientConfig(f.ca, pair(testcerts.NewCA(t, "another CA"), "mallory")))
		if err == nil {
			err = refused(c)
		} else {
			err = nil
		}
		if err != nil {
			t.Fatalf("a client certificate from another CA: %v", err)
		}
	})
	waitFor(t, "the refused handshakes counted", func() bool { return n.Stats().TLSHandshakeFailures == 2 })
	t.Run("certificate from the client CA", func(t *testing.T) {
		c, err := dialTLS(t, n, clientConfig(f.ca, pair(f.ca, "alice")))
		if err != nil {
			t.Fatal(err)
		}
		c.hello("alice", "phone")
	})
}

// TestTLSReload rotates the gateway's certificate under a live session: new
// connections get the new certificate, the session established with the old
// one keeps working, and a failed reload keeps the certificate served.
func TestTLSReload(t *testing.T) {
	f := newTLSFixture(t)
	n, srv := f.start(t, nil)
	leaf := func(c *client) []byte { return c.nc.(*tls.Conn).ConnectionState().PeerCertificates[0].Raw }

	bob, err := dialTLS(t, n, clientConfig(f.ca))
	if err != nil {
		t.Fatal(err)
	}
	bob.hello("bob", "laptop")
	bob.ok(map[string]any{"op": "sub", "users": []string{"alice"}})
	if ev := bob.expectEvent("alice"); ev["online"] != false {
		t.Fatalf("bob's snapshot %v", ev)
	}
	oldLeaf := leaf(bob)

	// The operator replaces the files in place, then SIGHUP calls Reload.
	rotated := testcerts.NewCA(t, "rotated CA")
	next := rotated.Issue(t, "gw")
	writeFile(t, f.files.CertFile, next.CertPEM)
	writeFile(t, f.files.KeyFile, next.KeyPEM)
	if changed, err := srv.Reload(); err != nil || !changed {
		t.Fatalf("Reload: changed %v, %v", changed, err)
	}
	if changed, err := srv.Reload(); err != nil || changed {
		t.Fatalf("second Reload of the same files: changed %v, %v", changed, err)
	}

	if _, err := dialTLS(t, n, clientConfig(f.ca)); err == nil {
		t.Fatal("a new connection still got the old certificate")
	}
	alice, err := dialTLS(t, n, clientConfig(rotated))
	if err != nil {
		t.Fatalf("new connection after reload: %v", err)
	}
	if bytes.Equal(leaf(alice), oldLeaf) {
		t.Fatal("the new connection got the old certificate")
	}
	alice.hello("alice", "phone")

	// Bob's session, established before the reload, still works both ways.
	if ev := bob.expectEvent("alice"); ev["online"] != true {
		t.Fatalf("bob's event %v", ev)
	}
	if hb := bob.call(map[string]any{"op": "hb"}); hb.str("op") != protocol.OpHB {
		t.Fatalf("bob's heartbeat: %v", hb)
	}
	if !bytes.Equal(leaf(bob), oldLeaf) {
		t.Fatal("bob's connection changed certificate")
	}

	// A broken key file: Reload fails, the rotated certificate stays.
	writeFile(t, f.files.KeyFile, []byte("-----BEGIN PRIVATE KEY-----\nbroken\n-----END PRIVATE KEY-----\n"))
	if changed, err := srv.Reload(); err == nil || changed || !strings.Contains(err.Error(), "still serving") {
		t.Fatalf("Reload of a broken key: changed %v, %v", changed, err)
	}
	if _, err := dialTLS(t, n, clientConfig(rotated)); err != nil {
		t.Fatalf("after a failed reload: %v", err)
	}
}

// TestTLSStalledHandshake: a client that stops mid-handshake holds up no
// one, and is closed once HandshakeTimeout passes.
func TestTLSStalledHandshake(t *testing.T) {
	f := newTLSFixture(t)
	stalls := func(t *testing.T, n *Node) net.Conn {
		nc, err := net.Dial("tcp", n.ClientAddr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		// A TLS record header announcing a 512-byte ClientHello, and the
		// first bytes of it: the server waits for the rest.
		if _, err := nc.Write([]byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00}); err != nil {
			t.Fatal(err)
		}
		return nc
	}

	t.Run("others are served meanwhile", func(t *testing.T) {
		n, _ := f.start(t, func(c *Config) { c.HandshakeTimeout = time.Minute })
		stalled := stalls(t, n)
		waitFor(t, "the stalled connection accepted", func() bool { return n.Stats().Accepted == 1 })
		c, err := dialTLS(t, n, clientConfig(f.ca))
		if err != nil {
			t.Fatal(err)
		}
		c.hello("alice", "phone")
		// The stalled handshake is still pending: alice was not served
		// after it gave up.
		stalled.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
		var ne net.Error
		if _, err := stalled.Read(make([]byte, 1)); !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("the stalled connection ended before alice was served: %v", err)
		}
	})
	t.Run("the stalled client is closed after HandshakeTimeout", func(t *testing.T) {
		n, _ := f.start(t, func(c *Config) { c.HandshakeTimeout = 200 * time.Millisecond })
		stalled := stalls(t, n)
		stalled.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadAll(stalled); err != nil {
			t.Fatalf("the stalled connection was not closed: %v", err)
		}
		waitFor(t, "the timed-out handshake counted", func() bool { return n.Stats().TLSHandshakeFailures == 1 })
	})
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Clean(path), b, 0o600); err != nil {
		t.Fatal(err)
	}
}
