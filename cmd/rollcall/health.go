package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

// runHealth asks an agent whether it is healthy, for container health
// checks (the image has no curl): GET /healthz, or /readyz with --ready.
// It returns nil (exit 0) on 200 and an error (exit 1) on any other answer,
// no answer, or no answer within --probe-timeout.
//
// --http-addr and --tls-cert are the agent's own flags, so
// ROLLCALL_HTTP_ADDR and ROLLCALL_TLS_CERT in a container's environment
// point both at the same port, speaking the same protocol. A wildcard host
// (0.0.0.0, [::] or none) is asked on loopback: it is where the agent
// listens from the health check's point of view, inside the container.
func runHealth(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("health", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("http-addr", "127.0.0.1:7401", "HTTP address of the agent to ask (its --http-addr; a 0.0.0.0 or [::] host is asked on loopback)")
	ready := fs.Bool("ready", false, "ask /readyz (joined the cluster and synced, not draining) instead of /healthz (running, not draining)")
	// Not --timeout: ROLLCALL_TIMEOUT is the agent's session timeout, and
	// the health check shares the agent's environment.
	probeTimeout := fs.Duration("probe-timeout", 2*time.Second, "how long to wait for the answer")
	// The agent's own flag too: ROLLCALL_TLS_CERT in the container's
	// environment tells the health check the HTTP port speaks TLS.
	tlsCert := fs.String("tls-cert", "", "the agent's certificate (its --tls-cert): when set, ask over https and accept only the certificate in this file")
	if err := parseFlags(fs, args, os.Environ()); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	path := "/healthz"
	if *ready {
		path = "/readyz"
	}
	var pin *x509.Certificate
	if *tlsCert != "" {
		var err error
		if pin, err = leafOf(*tlsCert); err != nil {
			return err
		}
	}
	status, body, err := probe(ctx, *addr, path, *probeTimeout, pin)
	if err != nil {
		return err
	}
	if status != http.StatusOK {
		return fmt.Errorf("unhealthy: GET %s answered %d %s", path, status, body)
	}
	_, err = fmt.Fprintf(stdout, "healthy: GET %s answered %d %s\n", path, status, body)
	return err
}

// probe makes one GET to the agent at addr and returns the status code and
// the body (at most 512 bytes) on one line, for Docker's health log. With
// pin it speaks https and accepts only a server presenting pin as its
// leaf: the probe dials loopback, which the certificate need not name.
func probe(ctx context.Context, addr, path string, timeout time.Duration, pin *x509.Certificate) (int, string, error) {
	target, err := loopbackFor(addr)
	if err != nil {
		return 0, "", err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// No proxy from the environment (HTTP_PROXY): the agent is local.
	tr := &http.Transport{Proxy: nil, DisableKeepAlives: true}
	scheme := "http"
	if pin != nil {
		scheme = "https"
		tr.TLSClientConfig = &tls.Config{
			MinVersion: tls.VersionTLS12,
			// The chain and names are not what is checked: the exact
			// certificate is, in VerifyConnection.
			InsecureSkipVerify: true,
			VerifyConnection: func(cs tls.ConnectionState) error {
				if len(cs.PeerCertificates) == 0 || !bytes.Equal(cs.PeerCertificates[0].Raw, pin.Raw) {
					return errors.New("the agent presented another certificate than --tls-cert")
				}
				return nil
			},
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+target+path, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return 0, "", fmt.Errorf("unhealthy: GET %s from %s: %w", path, target, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	var one bytes.Buffer
	if json.Compact(&one, raw) != nil {
		one.Reset()
		one.WriteString(strings.Join(strings.Fields(string(raw)), " "))
	}
	return resp.StatusCode, one.String(), nil
}

// leafOf reads the first certificate of a PEM file.
func leafOf(path string) (*x509.Certificate, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert: %w", err)
	}
	for {
		var b *pem.Block
		if b, raw = pem.Decode(raw); b == nil {
			return nil, fmt.Errorf("--tls-cert %s: no PEM certificate in it", path)
		}
		if b.Type == "CERTIFICATE" {
			c, err := x509.ParseCertificate(b.Bytes)
			if err != nil {
				return nil, fmt.Errorf("--tls-cert %s: %w", path, err)
			}
			return c, nil
		}
	}
}

// loopbackFor returns the address to dial for an agent listening on addr:
// addr itself, or loopback on its port when its host is a wildcard.
func loopbackFor(addr string) (string, error) {
	if addr == "" {
		return "", errors.New("--http-addr is empty: the agent serves no HTTP, so there is nothing to ask")
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("--http-addr %q: %w", addr, err)
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	return net.JoinHostPort(host, port), nil
}
