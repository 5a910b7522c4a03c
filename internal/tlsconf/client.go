package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
)

// ClientFiles says how a client (rollcall connect, members, leave, keys)
// speaks TLS to an agent. The zero value is plain TCP.
type ClientFiles struct {
	// Enabled asks for TLS with the system's roots. Any other field set
	// implies it.
	Enabled bool
	// CAFile holds the PEM CA certificates to verify the agent's certificate
	// against, instead of the system's roots.
	CAFile string
	// ServerName is the name the agent's certificate must carry. Empty: the
	// host of the address dialled.
	ServerName string
	// CertFile and KeyFile are the client certificate and key presented to
	// an agent that requires them (mutual TLS): both or neither.
	CertFile string
	KeyFile  string
}

// On reports whether TLS is asked for.
func (f ClientFiles) On() bool {
	return f.Enabled || f.CAFile != "" || f.ServerName != "" || f.CertFile != "" || f.KeyFile != ""
}

// Config returns the client configuration, or nil (and no error) when TLS is
// not asked for. Dial with tls.Dialer or an http.Transport, which take the
// server name from the address when ServerName is empty.
func (f ClientFiles) Config() (*tls.Config, error) {
	if !f.On() {
		return nil, nil
	}
	c := &tls.Config{MinVersion: MinVersion, ServerName: f.ServerName}
	if f.CAFile != "" {
		b, err := os.ReadFile(f.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tls: read CA: %w", err)
		}
		pool, _, err := certPool(b)
		if err != nil {
			return nil, fmt.Errorf("tls: CA %s: %w", f.CAFile, err)
		}
		c.RootCAs = pool
	}
	switch {
	case f.CertFile != "" && f.KeyFile != "":
		cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tls: client certificate %s with key %s: %w", f.CertFile, f.KeyFile, err)
		}
		c.Certificates = []tls.Certificate{cert}
	case f.CertFile != "" || f.KeyFile != "":
		return nil, errors.New("tls: a client certificate needs both its certificate file and its key file")
	}
	return c, nil
}

// parseCerts decodes every CERTIFICATE block of a PEM file; it fails on a
// file with none or with a block that does not parse.
func parseCerts(b []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %w", len(certs)+1, err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, errors.New("no PEM certificate in the file")
	}
	return certs, nil
}
