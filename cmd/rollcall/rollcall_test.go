package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"go.uber.org/zap"

	"github.com/rollcall/rollcall/auth"
	"github.com/rollcall/rollcall/internal/testkit"
)

func TestParseFlagsEnv(t *testing.T) {
	env := []string{"ROLLCALL_CLIENT_ADDR=0.0.0.0:1", "ROLLCALL_DEV=true", "ROLLCALL_TIMEOUT=30s", "ROLLCALL_NAME=from-env", "ROLLCALL_NOT_A_FLAG=x", "PATH=/bin"}
	af := defaultAgentConfig()
	fs, _ := agentFlagSet(&af, io.Discard)
	if err := parseFlags(fs, []string{"--name", "from-flag", "--join", "a:1, b:2"}, env); err != nil {
		t.Fatal(err)
	}
	if af.Node.ClientAddr != "0.0.0.0:1" || !af.Node.Dev || af.Node.Timeout != 30*time.Second || af.Node.Name != "from-flag" ||
		af.Node.Heartbeat != 5*time.Second {
		t.Fatalf("flags %+v", af)
	}
	if got := af.Gossip.Join; len(got) != 2 || got[1] != "b:2" {
		t.Fatalf("join %q", got)
	}
	fs = newAgentFlagSet()
	if err := parseFlags(fs, nil, []string{"ROLLCALL_HEARTBEAT=soon"}); err == nil || !strings.Contains(err.Error(), "ROLLCALL_HEARTBEAT") {
		t.Fatalf("bad env accepted: %v", err)
	}
	fs = newAgentFlagSet()
	if err := parseFlags(fs, []string{"extra"}, nil); err == nil {
		t.Fatal("positional argument accepted")
	}
	if envName("gossip-advertise") != "ROLLCALL_GOSSIP_ADVERTISE" {
		t.Fatal(envName("gossip-advertise"))
	}
}

// The agent reads plain TCP clients with io_uring unless told otherwise,
// by flag or environment (it falls back to epoll where the kernel refuses).
func TestIOUringIsTheAgentsDefault(t *testing.T) {
	ioUring := func(args, env []string) bool {
		af := defaultAgentConfig()
		fs, _ := agentFlagSet(&af, io.Discard)
		if err := parseFlags(fs, append([]string{"--dev", "--name", "n"}, args...), env); err != nil {
			t.Fatal(err)
		}
		cfg, err := af.nodeConfig(zap.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		return cfg.IOUring
	}
	if !ioUring(nil, nil) {
		t.Fatal("the default agent reads with epoll, want io_uring")
	}
	if ioUring([]string{"--io-uring=false"}, nil) {
		t.Fatal("--io-uring=false still reads with io_uring")
	}
	if ioUring(nil, []string{"ROLLCALL_IO_URING=false"}) {
		t.Fatal("ROLLCALL_IO_URING=false still reads with io_uring")
	}
}

func TestAgentConfigNeedsAuth(t *testing.T) {
	af := testAgentConfig()
	if _, err := af.nodeConfig(zap.NewNop()); err == nil {
		t.Fatal("no --secret-file and no --dev accepted")
	}
	af.TokenSource.SecretFile = writeSecret(t)
	cfg, err := af.nodeConfig(zap.NewNop())
	if err != nil || cfg.TokenVerifier == nil || cfg.TokenVerifier.Keys().Len() != 1 || cfg.Dev {
		t.Fatalf("config %+v %v", cfg, err)
	}
}

func writeSecret(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte("0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// writeAdminToken writes an admin token file (with the trailing newline
// echo leaves) and returns its path.
func writeAdminToken(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "admin-token")
	if err := os.WriteFile(p, []byte(testAdminToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// testAdminToken is the admin token writeAdminToken writes.
const testAdminToken = "admin-token-of-the-tests-0123456789"

func TestTokenCommand(t *testing.T) {
	secret := writeSecret(t)
	var out bytes.Buffer
	if err := runToken(t.Context(), []string{"--secret-file", secret, "--user", "alice", "--ttl", "2h"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	var claims jwt.RegisteredClaims
	_, err := jwt.ParseWithClaims(strings.TrimSpace(out.String()), &claims, func(*jwt.Token) (any, error) {
		return []byte("0123456789abcdef0123456789abcdef"), nil
	}, jwt.WithValidMethods([]string{"HS256"}))
	if err != nil || claims.Subject != "alice" || time.Until(claims.ExpiresAt.Time) < 110*time.Minute {
		t.Fatalf("token claims %+v %v", claims, err)
	}
	if err := runToken(t.Context(), []string{"--user", "alice"}, io.Discard, io.Discard); err == nil {
		t.Fatal("missing --secret-file accepted")
	}
	out.Reset()
	if err := runToken(t.Context(), []string{"--secret-file", secret, "--user", "alice", "--info", `{"name": "Alice"}`}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	v, err := auth.NewVerifier(auth.Source{SecretFile: secret}, auth.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	if id, err := v.Verify(strings.TrimSpace(out.String()), time.Now()); err != nil || id.Info != `{"name":"Alice"}` {
		t.Fatalf("--info: %+v %v", id, err)
	}
	if err := runToken(t.Context(), []string{"--secret-file", secret, "--user", "alice", "--info", `[1]`}, io.Discard, io.Discard); err == nil {
		t.Fatal("--info that is not an object accepted")
	}
}

// freeAddr returns a loopback address held free for the test.
func freeAddr(t *testing.T) string {
	t.Helper()
	return testkit.FreeAddr(t)
}

// syncBuffer is a bytes.Buffer safe for a writer and a poller.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func waitOutput(t *testing.T, what string, buf *syncBuffer, want string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(buf.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %q never appeared in:\n%s", what, want, buf.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestAgentAndConnect runs the agent with a secret, mints tokens with the
// token command, and has two interactive clients see each other: the
// newcomer's walkthrough in docs/protocol.md.
func TestAgentAndConnect(t *testing.T) {
	secret := writeSecret(t)
	addr, httpAddr := freeAddr(t), freeAddr(t)
	ctx, stop := context.WithCancel(t.Context())
	agentDone := make(chan error, 1)
	go func() {
		agentDone <- runAgent(ctx, []string{"--name", "gw1", "--client-addr", addr, "--http-addr", httpAddr, "--gossip-addr", "",
			"--secret-file", secret, "--heartbeat", "100ms", "--timeout", "1s", "--log-level", "warn", "--log-format", "json"}, io.Discard, io.Discard)
	}()
	waitDial(t, addr)

	// bob may read everyone; alice may join team and message bob.
	grants := map[string][]string{"bob": {"--read", "*"}, "alice": {"--join", "team", "--send", "user:bob"}}
	token := func(user string) string {
		var out bytes.Buffer
		if err := runToken(t.Context(), append([]string{"--secret-file", secret, "--user", user}, grants[user]...), &out, io.Discard); err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(out.String())
	}
	type session struct {
		in   *io.PipeWriter
		out  *syncBuffer
		done chan error
	}
	start := func(user, device string, extra ...string) *session {
		s := &session{out: &syncBuffer{}, done: make(chan error, 1)}
		var r *io.PipeReader
		r, s.in = io.Pipe()
		args := append([]string{"--addr", addr, "--user", user, "--device", device, "--token", token(user)}, extra...)
		go func() { s.done <- connectClient(t.Context(), args, r, s.out, io.Discard) }()
		return s
	}
	bob := start("bob", "laptop")
	waitOutput(t, "bob welcome", bob.out, "connected to gw1 as bob/laptop")
	fmt.Fprintln(bob.in, "sub alice")
	waitOutput(t, "bob's snapshot", bob.out, "* alice: offline")

	alice := start("alice", "phone", "--groups", "team")
	waitOutput(t, "alice welcome", alice.out, "connected to gw1 as alice/phone")
	waitOutput(t, "bob sees alice", bob.out, "* alice: available (phone available @gw1)")
	fmt.Fprintln(alice.in, "status busy")
	fmt.Fprintln(alice.in, "account auth phone")
	waitOutput(t, "bob sees busy", bob.out, "* alice: busy (phone busy @gw1)")
	fmt.Fprintln(alice.in, "send bob hello there")
	waitOutput(t, "delivered", alice.out, "ok: delivered to 1 session(s)")
	waitOutput(t, "message", bob.out, "<alice/phone> hello there")
	fmt.Fprintln(bob.in, "group team")
	waitOutput(t, "group", bob.out, "group team: 1 online")
	fmt.Fprintln(bob.in, "locate alice")
	waitOutput(t, "locate", bob.out, "alice: 1 active session(s)")
	fmt.Fprintln(bob.in, "get alice nobody")
	waitOutput(t, "get", bob.out, "nobody: offline")
	fmt.Fprintln(bob.in, "send alice hi")
	waitOutput(t, "forbidden send", bob.out, "error forbidden: the token does not allow sending to alice")
	fmt.Fprintln(bob.in, "refresh "+token("bob"))
	waitOutput(t, "refresh", bob.out, "ok: token expires at ")
	fmt.Fprintln(bob.in, "hb")
	waitOutput(t, "hb", bob.out, "hb ok, session expires at ")
	fmt.Fprintln(bob.in, "nonsense")
	waitOutput(t, "unknown command", bob.out, `unknown command "nonsense"`)
	fmt.Fprintln(bob.in, `{"op":"dance"}`)
	waitOutput(t, "raw JSON", bob.out, "error unknown_op")

	// Heartbeats are automatic: well past the 1s timeout, alice is online.
	time.Sleep(1500 * time.Millisecond)
	if strings.Count(bob.out.String(), "* alice: offline") != 1 {
		t.Fatalf("alice expired while heartbeating?\n%s", bob.out.String())
	}
	fmt.Fprintln(alice.in, "bye")
	if err := <-alice.done; err != nil {
		t.Fatalf("alice: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for strings.Count(bob.out.String(), "* alice: offline") != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("bob never saw alice leave:\n%s", bob.out.String())
		}
		time.Sleep(5 * time.Millisecond)
	}

	// SIGTERM: bob is told, and his client tries to reconnect until he
	// quits.
	stop()
	if err := <-agentDone; err != nil {
		t.Fatalf("agent: %v", err)
	}
	waitOutput(t, "bob told", bob.out, "error shutting_down: ")
	waitOutput(t, "bob reconnecting", bob.out, "-- connection lost; reconnecting")
	bob.in.Close()
	if err := <-bob.done; err != nil {
		t.Fatalf("bob: %v", err)
	}
}

func TestConnectBadToken(t *testing.T) {
	secret := writeSecret(t)
	addr := freeAddr(t)
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	go runAgent(ctx, []string{"--name", "gw", "--client-addr", addr, "--http-addr", "", "--gossip-addr", "", "--secret-file", secret, "--log-level", "error"}, io.Discard, io.Discard)
	waitDial(t, addr)
	out := &syncBuffer{}
	err := connectClient(t.Context(), []string{"--addr", addr, "--user", "mallory", "--token", "x.y.z"}, strings.NewReader(""), out, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "auth_failed") {
		t.Fatalf("connect: %v\n%s", err, out.String())
	}
}

func TestParseCommand(t *testing.T) {
	for line, want := range map[string]string{
		"status busy":          `{"op":"status","status":"busy"}`,
		"account dnd":          `{"op":"account","override":"dnd"}`,
		"account invisible":    `{"op":"account","override":"invisible"}`,
		"account auth desktop": `{"op":"account","authoritative_device":"desktop"}`,
		"account auth -":       `{"op":"account","authoritative_device":""}`,
		"get bob carol":        `{"op":"get","users":["bob","carol"]}`,
		"group g":              `{"op":"group","group":"g"}`,
		"locate bob":           `{"op":"locate","user":"bob"}`,
		"sub bob":              `{"op":"sub","users":["bob"]}`,
		"sub group g":          `{"op":"sub","group":"g"}`,
		"unsub bob carol":      `{"op":"unsub","users":["bob","carol"]}`,
		"join g":               `{"op":"join","group":"g"}`,
		"leave g":              `{"op":"leave","group":"g"}`,
		"send bob hello  you":  `{"op":"send","to":"bob","body":"hello  you"}`,
		`send bob {"x":1}`:     `{"op":"send","to":"bob","body":{"x":1}}`,
		"hb":                   `{"op":"hb","id":"hb"}`,
		"refresh eyJ.x.y":      `{"op":"refresh","token":"eyJ.x.y"}`,
		`send bob [1, 2]`:      `{"op":"send","to":"bob","body":[1,2]}`,
		`send bob 42`:          `{"op":"send","to":"bob","body":"42"}`,
		`send bob <b>&`:        `{"op":"send","to":"bob","body":"\u003cb\u003e\u0026"}`,
		`{"op":"hb"}`:          `{"op":"hb"}`,
	} {
		got, quit, err := parseCommand(line)
		if err != nil || quit || string(got) != want {
			t.Errorf("%q: got %s %v %v, want %s", line, got, quit, err, want)
		}
	}
	for line, want := range map[string]string{
		"account text at lunch":              `{"op":"account","text":"at lunch"}`,
		"account text -":                     `{"op":"account","text":""}`,
		"account emoji 🍔":                    `{"op":"account","emoji":"🍔"}`,
		"account until 2030-01-02T03:04:05Z": `{"op":"account","until":"2030-01-02T03:04:05Z"}`,
		"account until -":                    `{"op":"account","until":""}`,
		`meta {"tab": "inbox"}`:              `{"op":"meta","meta":{"tab":"inbox"}}`,
	} {
		got, _, err := parseCommand(line)
		if err != nil || string(got) != want {
			t.Errorf("%q: got %s %v, want %s", line, got, err, want)
		}
	}
	for _, line := range []string{"status", "refresh", "send bob", "frobnicate", "{bad", "get", "account text", "meta {bad"} {
		if _, _, err := parseCommand(line); err == nil {
			t.Errorf("%q accepted", line)
		}
	}
	if _, quit, _ := parseCommand("bye"); !quit {
		t.Error("bye does not quit")
	}
}

func waitDial(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			// Say nothing; the agent's handshake timeout closes it.
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent not listening on %s: %v", addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
