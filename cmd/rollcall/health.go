package main

import (
	"bytes"
	"context"
	"encoding/json"
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
// --http-addr is the agent's own flag, so ROLLCALL_HTTP_ADDR in a
// container's environment points both at the same port. A wildcard host
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
	if err := parseFlags(fs, args, os.Getenv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	path := "/healthz"
	if *ready {
		path = "/readyz"
	}
	status, body, err := probe(ctx, *addr, path, *probeTimeout)
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
// the body (at most 512 bytes) on one line, for Docker's health log.
func probe(ctx context.Context, addr, path string, timeout time.Duration) (int, string, error) {
	target, err := loopbackFor(addr)
	if err != nil {
		return 0, "", err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// TLS on the HTTP port (--tls-cert/--tls-key) is not wired here yet: when
	// it is, the probe speaks https to a TLS agent, trusting the agent's own
	// certificate or --tls-ca.
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+target+path, nil)
	if err != nil {
		return 0, "", err
	}
	// No proxy from the environment (HTTP_PROXY): the agent is local.
	client := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	resp, err := client.Do(req)
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
