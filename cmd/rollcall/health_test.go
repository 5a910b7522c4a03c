package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// healthServer answers /healthz and /readyz with the given codes and
// records the paths asked.
func healthServer(t *testing.T, healthz, readyz int) (addr string, asked func() string) {
	t.Helper()
	var mu sync.Mutex
	var paths []string
	record := func(p string) {
		mu.Lock()
		defer mu.Unlock()
		paths = append(paths, p)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		record(r.URL.Path)
		w.WriteHeader(healthz)
		io.WriteString(w, "{\n  \"status\": \"x\"\n}\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		record(r.URL.Path)
		w.WriteHeader(readyz)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), func() string {
		mu.Lock()
		defer mu.Unlock()
		return strings.Join(paths, " ")
	}
}

func TestHealthCommand(t *testing.T) {
	addr, asked := healthServer(t, http.StatusOK, http.StatusServiceUnavailable)
	var out bytes.Buffer
	if err := runHealth(t.Context(), []string{"--http-addr", addr}, &out, io.Discard); err != nil {
		t.Fatalf("healthy agent reported unhealthy: %v", err)
	}
	if !strings.Contains(out.String(), `200 {"status":"x"}`) {
		t.Fatalf("output %q", out.String())
	}
	// --ready asks /readyz, which says 503 here: exit 1.
	err := runHealth(t.Context(), []string{"--http-addr", addr, "--ready"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("503 from /readyz: %v", err)
	}
	if got := asked(); got != "/healthz /readyz" {
		t.Fatalf("paths asked: %q", got)
	}
}

func TestHealthCommandDraining(t *testing.T) {
	addr, _ := healthServer(t, http.StatusServiceUnavailable, http.StatusServiceUnavailable)
	if err := runHealth(t.Context(), []string{"--http-addr", addr}, io.Discard, io.Discard); err == nil {
		t.Fatal("503 from /healthz reported healthy")
	}
}

func TestHealthCommandNoAgent(t *testing.T) {
	addr := freeAddr(t)
	if err := runHealth(t.Context(), []string{"--http-addr", addr}, io.Discard, io.Discard); err == nil {
		t.Fatal("nothing listening reported healthy")
	}
	if err := runHealth(t.Context(), []string{"--http-addr", ""}, io.Discard, io.Discard); err == nil ||
		!strings.Contains(err.Error(), "empty") {
		t.Fatalf("empty --http-addr: %v", err)
	}
}

// An agent that accepts the connection but never answers must not hang
// the health check: Docker would pile up checks until its own timeout.
func TestHealthCommandHungAgent(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never answered
		}
	}()
	err = runHealth(t.Context(), []string{"--http-addr", ln.Addr().String(), "--probe-timeout", "100ms"}, io.Discard, io.Discard)
	if err == nil {
		t.Fatal("an agent that never answers reported healthy")
	}
}

// Inside a container the agent listens on 0.0.0.0 (ROLLCALL_HTTP_ADDR);
// the health check, sharing that environment, asks loopback.
func TestHealthCommandWildcardAndEnv(t *testing.T) {
	addr, _ := healthServer(t, http.StatusOK, http.StatusOK)
	_, port, _ := net.SplitHostPort(addr)
	t.Setenv("ROLLCALL_HTTP_ADDR", "0.0.0.0:"+port)
	if err := runHealth(t.Context(), nil, io.Discard, io.Discard); err != nil {
		t.Fatalf("ROLLCALL_HTTP_ADDR=0.0.0.0:%s: %v", port, err)
	}
	for in, want := range map[string]string{
		"0.0.0.0:7401": "127.0.0.1:7401", ":7401": "127.0.0.1:7401", "[::]:7401": "[::1]:7401", "10.0.0.2:7401": "10.0.0.2:7401",
	} {
		if got, err := loopbackFor(in); err != nil || got != want {
			t.Errorf("loopbackFor(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// selfSigned makes a certificate for 127.0.0.1 and its key.
func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// writeCertPEM writes a server's certificate as the agent's --tls-cert
// file would hold it.
func writeCertPEM(t *testing.T, srv *httptest.Server) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "cert.pem")
	b := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// With the agent's --tls-cert (ROLLCALL_TLS_CERT), the health check speaks
// https to loopback and accepts exactly that certificate: not another
// one, even from a server on the agent's port.
func TestHealthCommandTLS(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"status":"ok"}`) })
	agent := httptest.NewTLSServer(ok)
	defer agent.Close()
	// httptest's servers share one certificate: the impostor gets its own.
	impostor := httptest.NewUnstartedServer(ok)
	impostor.TLS = &tls.Config{Certificates: []tls.Certificate{selfSigned(t)}}
	impostor.StartTLS()
	defer impostor.Close()
	addr := strings.TrimPrefix(agent.URL, "https://")
	cert := writeCertPEM(t, agent)

	if err := runHealth(t.Context(), []string{"--http-addr", addr, "--tls-cert", cert}, io.Discard, io.Discard); err != nil {
		t.Fatalf("TLS agent with its own certificate: %v", err)
	}
	t.Setenv("ROLLCALL_TLS_CERT", cert)
	if err := runHealth(t.Context(), []string{"--http-addr", addr}, io.Discard, io.Discard); err != nil {
		t.Fatalf("ROLLCALL_TLS_CERT: %v", err)
	}
	err := runHealth(t.Context(), []string{"--http-addr", strings.TrimPrefix(impostor.URL, "https://")}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "another certificate") {
		t.Fatalf("a server with another certificate was accepted: %v", err)
	}
	// Plain HTTP to a TLS port is not healthy (400 from the TLS server).
	if err := runHealth(t.Context(), []string{"--http-addr", addr, "--tls-cert", ""}, io.Discard, io.Discard); err == nil {
		t.Fatal("plain HTTP to a TLS port reported healthy")
	}
	bad := filepath.Join(t.TempDir(), "bad.pem")
	os.WriteFile(bad, []byte("not a certificate"), 0o644)
	if err := runHealth(t.Context(), []string{"--http-addr", addr, "--tls-cert", bad}, io.Discard, io.Discard); err == nil ||
		!strings.Contains(err.Error(), "no PEM certificate") {
		t.Fatalf("unreadable --tls-cert: %v", err)
	}
}
