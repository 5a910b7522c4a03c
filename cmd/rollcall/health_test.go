package main

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
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
