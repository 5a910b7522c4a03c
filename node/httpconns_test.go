package node

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rollcall/rollcall/auth"
	"github.com/rollcall/rollcall/protocol"
)

// rawHTTP is an HTTP/1.1 connection a test drives by hand, to see what
// the server does with the connection itself.
type rawHTTP struct {
	t  testing.TB
	nc net.Conn
	br *bufio.Reader
}

func dialHTTP(t testing.TB, n *Node) *rawHTTP {
	t.Helper()
	nc, err := net.Dial("tcp", n.HTTPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &rawHTTP{t: t, nc: nc, br: bufio.NewReader(nc)}
}

// get sends GET path on the connection (kept alive) and returns the
// response's status and body.
func (c *rawHTTP) get(path string) (int, string) {
	c.t.Helper()
	c.nc.SetDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck // a test bound
	if _, err := io.WriteString(c.nc, "GET "+path+" HTTP/1.1\r\nHost: rollcall\r\n\r\n"); err != nil {
		c.t.Fatalf("write: %v", err)
	}
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		c.t.Fatalf("read response: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("read body: %v", err)
	}
	return resp.StatusCode, string(body)
}

// expectClosed waits for the server to close the connection.
func (c *rawHTTP) expectClosed() {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck // a test bound
	_, err := c.br.ReadByte()
	var ne net.Error
	if err == nil || errors.As(err, &ne) && ne.Timeout() {
		c.t.Fatalf("the connection is still open (read: %v)", err)
	}
}

// expectHTTPError checks a refusal's status, code and message.
func expectHTTPError(t testing.TB, status int, body string, wantStatus int, wantCode protocol.ErrorCode, says string) {
	t.Helper()
	var e struct{ Error, Code string }
	if status != wantStatus || json.Unmarshal([]byte(body), &e) != nil || e.Code != string(wantCode) || !strings.Contains(e.Error, says) {
		t.Fatalf("got %d %s, want %d %s saying %q", status, body, wantStatus, wantCode, says)
	}
}

// TestHTTPIdleConnectionClosed: a keep-alive connection that sends no
// further request is closed after HTTPIdleTimeout, and stops counting.
func TestHTTPIdleConnectionClosed(t *testing.T) {
	n := uiNode(t, func(c *Config) { c.HTTPIdleTimeout = 50 * time.Millisecond })
	c := dialHTTP(t, n)
	if code, body := c.get("/healthz"); code != http.StatusOK {
		t.Fatalf("healthz: %d %s", code, body)
	}
	c.expectClosed()
	waitFor(t, "the idle connection to stop counting", func() bool { return n.HTTPConnections() == 0 })
}

// TestHTTPSilentConnectionClosed: a connection that never finishes its
// request headers is closed after HTTPReadHeaderTimeout.
func TestHTTPSilentConnectionClosed(t *testing.T) {
	n := uiNode(t, func(c *Config) { c.HTTPReadHeaderTimeout = 50 * time.Millisecond })
	c := dialHTTP(t, n)
	if _, err := io.WriteString(c.nc, "GET /healthz HTTP/1.1\r\nHost: rollcall\r\n"); err != nil {
		t.Fatal(err)
	}
	c.expectClosed()
}

// TestHTTPHeaderLimit: a request whose headers pass HTTPMaxHeaderBytes
// is refused with 431.
func TestHTTPHeaderLimit(t *testing.T) {
	n := uiNode(t, nil)
	c := dialHTTP(t, n)
	big := strings.Repeat("x", DefaultHTTPMaxHeaderBytes+4096)
	c.nc.SetDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck // a test bound
	if _, err := io.WriteString(c.nc, "GET /healthz HTTP/1.1\r\nHost: rollcall\r\nX-Big: "+big+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("status %d, want 431", resp.StatusCode)
	}
}

// TestHTTPConnectionCap: past MaxHTTPConnections the next connection is
// answered 503 overloaded and closed, counted; once one closes, a new one
// is served.
func TestHTTPConnectionCap(t *testing.T) {
	n := uiNode(t, func(c *Config) { c.MaxHTTPConnections = 2 })
	first, second := dialHTTP(t, n), dialHTTP(t, n)
	for _, c := range []*rawHTTP{first, second} {
		if code, _ := c.get("/healthz"); code != http.StatusOK {
			t.Fatalf("healthz: %d", code)
		}
	}
	third := dialHTTP(t, n)
	code, body := third.get("/healthz")
	expectHTTPError(t, code, body, http.StatusServiceUnavailable, protocol.CodeOverloaded, "most HTTP connections")
	third.expectClosed()
	if m := n.Metrics(); m.HTTPOverloaded != 1 || m.HTTPConnections != 2 {
		t.Fatalf("overloaded %d, open %d; want 1 and 2", m.HTTPOverloaded, m.HTTPConnections)
	}
	first.nc.Close()
	waitFor(t, "the closed connection to stop counting", func() bool { return n.HTTPConnections() == 1 })
	if code, _ := dialHTTP(t, n).get("/healthz"); code != http.StatusOK {
		t.Fatalf("after a close: %d", code)
	}
}

// TestHTTPConnectionsCountPerIP: HTTP connections count against
// MaxConnectionsPerIP together with the client port's: past it, the next
// HTTP connection is answered 429 too_many_connections.
func TestHTTPConnectionsCountPerIP(t *testing.T) {
	n := uiNode(t, func(c *Config) { c.MaxConnectionsPerIP = 2 })
	nc, err := net.Dial("tcp", n.ClientAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	waitConns(t, n, 1)
	if code, _ := dialHTTP(t, n).get("/healthz"); code != http.StatusOK {
		t.Fatalf("healthz: %d", code)
	}
	code, body := dialHTTP(t, n).get("/healthz")
	expectHTTPError(t, code, body, http.StatusTooManyRequests, protocol.CodeTooManyConnections, "connections to the gateway")
	if m := n.Metrics(); m.HTTPTooManyConnections != 1 {
		t.Fatalf("too many connections %d, want 1", m.HTTPTooManyConnections)
	}
}

// TestWebSocketCountsOnce: an upgraded WebSocket stops counting as an
// HTTP connection and counts as one client connection of its address.
func TestWebSocketCountsOnce(t *testing.T) {
	n := uiNode(t, nil)
	c := dialWS(t, wsURL(n), nil)
	c.hello("alice", "phone")
	n.mu.Lock()
	perIP, conns, httpConns := n.perIP[netip.MustParseAddr("127.0.0.1")], len(n.conns), n.httpConns
	n.mu.Unlock()
	if perIP != 1 || conns != 1 || httpConns != 0 {
		t.Fatalf("per IP %d, client connections %d, HTTP connections %d; want 1, 1, 0", perIP, conns, httpConns)
	}
}

// TestSourceKeyIPv6Prefix: IPv6 sources count by their /IPv6PrefixBits
// network, IPv4 sources by address.
func TestSourceKeyIPv6Prefix(t *testing.T) {
	key := func(bits int, addr string) netip.Addr {
		n := &Node{cfg: Config{IPv6PrefixBits: bits}}
		return n.sourceKey(net.TCPAddrFromAddrPort(netip.MustParseAddrPort(addr)))
	}
	for _, tc := range []struct {
		bits       int
		a, b       string
		sameSource bool
	}{
		{64, "[2001:db8:1:2::1]:1", "[2001:db8:1:2:ffff::9]:2", true},
		{64, "[2001:db8:1:2::1]:1", "[2001:db8:1:3::1]:1", false},
		{128, "[2001:db8:1:2::1]:1", "[2001:db8:1:2::2]:1", false},
		{48, "[2001:db8:1:2::1]:1", "[2001:db8:1:3::1]:1", true},
		{64, "10.0.0.1:1", "10.0.0.2:1", false},
		{64, "[::ffff:10.0.0.1]:1", "10.0.0.1:2", true},
	} {
		if got := key(tc.bits, tc.a) == key(tc.bits, tc.b); got != tc.sameSource {
			t.Errorf("/%d: %s and %s same source %v, want %v", tc.bits, tc.a, tc.b, got, tc.sameSource)
		}
	}
}

// TestEventStreamEndsWhenTokenExpires: a stream opened with a client
// token is served while the token is valid and ends with end
// {"reason":"token_expired"} at its exp, counted: the leeway, which
// allows for clock skew when a token is accepted, does not lengthen the
// stream's life. A token accepted within the leeway after its exp opens a
// stream that ends at once.
func TestEventStreamEndsWhenTokenExpires(t *testing.T) {
	n, clock := newAuthNode(t, func(c *Config) { c.HTTPAddr = "127.0.0.1:0" })
	n.streams.checkEvery = 10 * time.Millisecond
	tok := mint(t, secretSigner(t), auth.TokenSpec{User: "alice", TTL: 5 * time.Second}, clock.Now())
	s := openChanges(t, n, users("alice"), http.Header{"Authorization": {"Bearer " + tok}})
	defer s.close()
	s.expectEventOf(n, "snapshot", "alice")
	s.expectReady(true)

	// Just before exp the stream still carries changes.
	clock.Advance(5*time.Second - time.Millisecond)
	connect(t, n, "alice", "phone", map[string]any{"token": mint(t, secretSigner(t), auth.TokenSpec{User: "alice"}, clock.Now())})
	s.expectEventOf(n, "presence", "alice")

	// At exp, well within the leeway, it ends.
	clock.Advance(time.Millisecond)
	var end struct{ Reason string }
	s.expect("end", &end)
	if end.Reason != "token_expired" {
		t.Fatalf("end reason %q", end.Reason)
	}
	if _, ok := s.next(); ok {
		t.Fatal("the stream goes on after its end event")
	}

	// A token past its exp but within the leeway is accepted, and its
	// stream ends at once, after its snapshot.
	late := openChanges(t, n, users("alice"), http.Header{"Authorization": {"Bearer " + tok}})
	defer late.close()
	late.expectEventOf(n, "snapshot", "alice")
	late.expectReady(true)
	late.expect("end", &end)
	if end.Reason != "token_expired" {
		t.Fatalf("end reason of the late stream %q", end.Reason)
	}
	if m := n.Metrics(); m.EventStreamsTokenExpired != 2 {
		t.Fatalf("streams ended token_expired: %d", m.EventStreamsTokenExpired)
	}
}

// TestEventStreamEndsWhenItsKeyIsRemoved: after a key rotation that
// removes the key a stream's token was signed with, the stream ends with
// end {"reason":"key_removed"}; a stream whose key stays is not touched.
func TestEventStreamEndsWhenItsKeyIsRemoved(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "keys.jwks")
	jwks := func(kids ...string) {
		var parts []string
		for _, k := range kids {
			parts = append(parts, `{"kty":"oct","kid":"`+k+`","k":"`+b64(secretFor(k))+`"}`)
		}
		if err := os.WriteFile(keyFile, []byte(`{"keys":[`+strings.Join(parts, ",")+`]}`), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	jwks("old", "new")
	v, err := auth.NewVerifier(auth.Source{KeyFiles: []string{keyFile}}, auth.Options{})
	if err != nil {
		t.Fatal(err)
	}
	n, clock := newAuthNode(t, func(c *Config) { c.HTTPAddr = "127.0.0.1:0"; c.Secret = nil; c.TokenVerifier = v })
	n.streams.checkEvery = 10 * time.Millisecond
	tok := func(kid string) string {
		s, err := auth.NewSecretSigner(secretFor(kid))
		if err != nil {
			t.Fatal(err)
		}
		return mint(t, s, auth.TokenSpec{User: "alice", KeyID: kid}, clock.Now())
	}
	open := func(kid string) *sseStream {
		s := openChanges(t, n, users("alice"), http.Header{"Authorization": {"Bearer " + tok(kid)}})
		s.expectEventOf(n, "snapshot", "alice")
		s.expectReady(true)
		return s
	}
	gone, kept := open("old"), open("new")
	defer gone.close()
	defer kept.close()

	jwks("new")
	if _, err := n.ReloadTokenKeys(); err != nil {
		t.Fatal(err)
	}
	var end struct{ Reason string }
	gone.expect("end", &end)
	if end.Reason != "key_removed" {
		t.Fatalf("end reason %q", end.Reason)
	}
	connect(t, n, "alice", "phone", map[string]any{"token": tok("new")})
	kept.expectEventOf(n, "presence", "alice")
	if m := n.Metrics(); m.EventStreamsKeyRemoved != 1 {
		t.Fatalf("streams ended key_removed: %d", m.EventStreamsKeyRemoved)
	}
}

// TestEventStreamCaps: past MaxEventStreamsPerSubject streams of one
// token subject, and past MaxEventStreamsPerIP from one address, the next
// stream is refused with 429 and a JSON error saying why; a closed stream
// frees its place.
func TestEventStreamCaps(t *testing.T) {
	n, clock := newAuthNode(t, func(c *Config) {
		c.HTTPAddr = "127.0.0.1:0"
		c.AdminToken = []byte(testAdminToken)
		c.MaxEventStreamsPerSubject = 2
		c.MaxEventStreamsPerIP = 3
	})
	signer := secretSigner(t)
	alice := mint(t, signer, auth.TokenSpec{User: "alice"}, clock.Now())
	bob := mint(t, signer, auth.TokenSpec{User: "bob"}, clock.Now())
	open := func(user, token string) *sseStream {
		s := openChanges(t, n, users(user), http.Header{"Authorization": {"Bearer " + token}})
		s.expectEventOf(n, "snapshot", user)
		s.expectReady(true)
		return s
	}
	base := "http://" + n.HTTPAddr().String() + "/v1/events?users="
	a1 := open("alice", alice)
	defer a1.close()
	a2 := open("alice", alice)
	defer a2.close()
	code, _, body := httpDo(t, http.DefaultClient, "GET", base+"alice", alice)
	expectHTTPError(t, code, body, http.StatusTooManyRequests, protocol.CodeTooManySessions, "alice holds 2 event streams")

	b1 := open("bob", bob)
	defer b1.close()
	code, _, body = httpDo(t, http.DefaultClient, "GET", base+"bob", testAdminToken)
	expectHTTPError(t, code, body, http.StatusTooManyRequests, protocol.CodeTooManyConnections, "this address holds 3 event streams")

	if m := n.Metrics(); m.EventStreamsRefusedSubject != 1 || m.EventStreamsRefusedIP != 1 {
		t.Fatalf("refused per subject %d, per IP %d; want 1 and 1", m.EventStreamsRefusedSubject, m.EventStreamsRefusedIP)
	}
	a1.close()
	waitFor(t, "the closed stream to stop counting", func() bool {
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.streams.perSubject["alice"] == 1
	})
	a3 := open("alice", alice)
	a3.close()
}
