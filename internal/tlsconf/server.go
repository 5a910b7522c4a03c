// Package tlsconf builds the TLS configurations of the agent and of its
// client tools from PEM files: the server side's certificate and client CA,
// reloadable without a restart (Server), and the client side's roots, server
// name and client certificate (ClientFiles). It reads files and builds
// configurations; it never listens or dials.
package tlsconf

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// MinVersion is the oldest TLS version either side accepts.
const MinVersion = tls.VersionTLS12

// ServerFiles names the PEM files of a server's TLS identity.
type ServerFiles struct {
	// CertFile holds the certificate chain, leaf first. Required.
	CertFile string
	// KeyFile holds the leaf's private key (PKCS #1, PKCS #8 or SEC 1).
	// Required.
	KeyFile string
	// ClientCAFile, when set, holds the CA certificates client certificates
	// must chain to: every client must then present one (mutual TLS).
	// Empty: clients are not asked for a certificate.
	ClientCAFile string
}

// Server serves a certificate (and client CA) loaded from ServerFiles
// through the tls.Config that Config returns, and swaps them atomically on
// Reload: new handshakes get the new ones, established connections keep
// theirs and are never dropped. Safe for concurrent use.
type Server struct {
	files ServerFiles
	now   func() time.Time

	reloadMu sync.Mutex // serialises Reload
	current  atomic.Pointer[serverState]
	base     *tls.Config // static after NewServer
}

// serverState is one loaded set of files: the configuration handshakes get.
type serverState struct {
	config *tls.Config
	digest [sha256.Size]byte // of the files' contents, to tell a change
	info   CertInfo
}

// CertInfo describes the certificate a Server serves, for logs.
type CertInfo struct {
	Subject     string    // the leaf's subject
	DNSNames    []string  // the leaf's DNS names
	IPs         []string  // the leaf's IP addresses
	NotAfter    time.Time // when the leaf expires
	Fingerprint string    // SHA-256 of the leaf (DER), hex
	ClientCAs   int       // CA certificates client certificates are verified against; 0: no mutual TLS
}

// String renders the info in one line.
func (i CertInfo) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s", i.Subject)
	if names := append(append([]string(nil), i.DNSNames...), i.IPs...); len(names) > 0 {
		fmt.Fprintf(&b, " for %s", strings.Join(names, ","))
	}
	fmt.Fprintf(&b, ", expires %s, sha256 %s", i.NotAfter.UTC().Format(time.RFC3339), i.Fingerprint)
	if i.ClientCAs > 0 {
		fmt.Fprintf(&b, ", client certificates required (%d CA certificate(s))", i.ClientCAs)
	}
	return b.String()
}

// NewServer loads files and returns a Server serving them. An error names
// the file at fault.
func NewServer(files ServerFiles) (*Server, error) {
	return newServer(files, time.Now)
}

func newServer(files ServerFiles, now func() time.Time) (*Server, error) {
	if files.CertFile == "" || files.KeyFile == "" {
		return nil, errors.New("tls: need both a certificate file and a key file")
	}
	s := &Server{files: files, now: now}
	st, err := s.load()
	if err != nil {
		return nil, err
	}
	s.current.Store(st)
	s.base = &tls.Config{
		MinVersion: MinVersion,
		// Every handshake takes the configuration loaded last.
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return s.current.Load().config, nil
		},
		// Unused while GetConfigForClient answers; set so code that checks
		// for a certificate (http.Server.ServeTLS) finds one.
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return &s.current.Load().config.Certificates[0], nil
		},
	}
	return s, nil
}

// Config returns the server configuration: hand it to node.Config.TLS (or
// tls.NewListener). It is the same value for the Server's life and always
// serves what was loaded last; do not modify it.
func (s *Server) Config() *tls.Config { return s.base }

// Info describes the certificate being served.
func (s *Server) Info() CertInfo { return s.current.Load().info }

// Reload reads the files again. When their contents changed and they load
// (the key matches the certificate, the certificate has not expired, the
// client CA file holds certificates), new handshakes get them from now on and
// changed is true; connections already established are unaffected. When
// nothing changed it returns false and nil. On error the Server keeps
// serving what it served before.
func (s *Server) Reload() (changed bool, err error) {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	st, err := s.load()
	if err != nil {
		return false, fmt.Errorf("%w; still serving the previous certificate (%s)", err, s.current.Load().info)
	}
	if st.digest == s.current.Load().digest {
		return false, nil
	}
	s.current.Store(st)
	return true, nil
}

// load reads and checks the files.
func (s *Server) load() (*serverState, error) {
	f := s.files
	certPEM, err := os.ReadFile(f.CertFile)
	if err != nil {
		return nil, fmt.Errorf("tls: read certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(f.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("tls: read key: %w", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("tls: certificate %s with key %s: %w", f.CertFile, f.KeyFile, err)
	}
	leaf := cert.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("tls: certificate %s: %w", f.CertFile, err)
		}
	}
	if now := s.now(); now.After(leaf.NotAfter) {
		return nil, fmt.Errorf("tls: certificate %s expired at %s", f.CertFile, leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	sum := sha256.Sum256(leaf.Raw)
	info := CertInfo{
		Subject:     leaf.Subject.String(),
		DNSNames:    leaf.DNSNames,
		NotAfter:    leaf.NotAfter,
		Fingerprint: hex.EncodeToString(sum[:]),
	}
	for _, ip := range leaf.IPAddresses {
		info.IPs = append(info.IPs, ip.String())
	}
	config := &tls.Config{MinVersion: MinVersion, Certificates: []tls.Certificate{cert}}
	var caPEM []byte
	if f.ClientCAFile != "" {
		if caPEM, err = os.ReadFile(f.ClientCAFile); err != nil {
			return nil, fmt.Errorf("tls: read client CA: %w", err)
		}
		pool, n, err := certPool(caPEM)
		if err != nil {
			return nil, fmt.Errorf("tls: client CA %s: %w", f.ClientCAFile, err)
		}
		config.ClientCAs = pool
		config.ClientAuth = tls.RequireAndVerifyClientCert
		info.ClientCAs = n
	}
	return &serverState{config: config, digest: digest(certPEM, keyPEM, caPEM), info: info}, nil
}

// certPool parses every CERTIFICATE block of a PEM file.
func certPool(pemBytes []byte) (*x509.CertPool, int, error) {
	certs, err := parseCerts(pemBytes)
	if err != nil {
		return nil, 0, err
	}
	pool := x509.NewCertPool()
	for _, c := range certs {
		pool.AddCert(c)
	}
	return pool, len(certs), nil
}

// digest hashes the files' contents, each prefixed by its length so that no
// two different sets hash alike.
func digest(files ...[]byte) [sha256.Size]byte {
	h := sha256.New()
	for _, f := range files {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(f)))
		h.Write(n[:])
		h.Write(f)
	}
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}
