package node

import (
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rollcall/rollcall/protocol"
)

const testAdminToken = "an-admin-token-of-at-least-32-bytes!"

// httpDo makes a request with an optional bearer token and returns the
// status, the WWW-Authenticate header and the body.
func httpDo(t *testing.T, client *http.Client, method, url, token string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("WWW-Authenticate"), string(body)
}

// adminTestNode starts a node with an admin route (POST /v1/admin-test)
// and a read route (GET /v1/read-test) mounted like the agent's.
func adminTestNode(t *testing.T, mut func(*Config)) (*Node, string) {
	t.Helper()
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte(`{"ok":true}`)) }) //nolint:errcheck // test handler
	n := newTestNode(t, func(c *Config) {
		c.HTTPAddr = "127.0.0.1:0"
		c.Dev = false
		c.Secret = testSecret
		c.AdminHTTPHandlers = map[string]http.Handler{"POST /v1/admin-test": ok}
		c.ReadHTTPHandlers = map[string]http.Handler{"GET /v1/read-test": ok}
		if mut != nil {
			mut(c)
		}
	})
	return n, "http://" + n.HTTPAddr().String()
}

var adminRoutes = []struct{ method, path string }{
	{"POST", "/v1/admin-test"},
	{"GET", "/debug/pprof/"},
	{"GET", "/debug/pprof/cmdline"},
	{"GET", "/debug/pprof/heap"},
}

func TestAdminEndpointsNeedTheToken(t *testing.T) {
	_, base := adminTestNode(t, func(c *Config) { c.AdminToken = []byte(testAdminToken) })
	for _, r := range adminRoutes {
		for _, tc := range []struct {
			name, token string
			want        int
		}{
			{"no token", "", http.StatusUnauthorized},
			{"wrong token", strings.Replace(testAdminToken, "a", "b", 1), http.StatusUnauthorized},
			{"a prefix of the token", testAdminToken[:32], http.StatusUnauthorized},
			{"the client secret", string(testSecret), http.StatusUnauthorized},
			{"the token", testAdminToken, http.StatusOK},
		} {
			code, challenge, body := httpDo(t, http.DefaultClient, r.method, base+r.path, tc.token)
			if code != tc.want {
				t.Errorf("%s %s with %s: %d, want %d: %s", r.method, r.path, tc.name, code, tc.want, body)
				continue
			}
			if code == http.StatusUnauthorized {
				var e struct{ Error string }
				if !strings.HasPrefix(challenge, "Bearer") || json.Unmarshal([]byte(body), &e) != nil || e.Error == "" {
					t.Errorf("%s %s with %s: challenge %q, body %s", r.method, r.path, tc.name, challenge, body)
				}
			}
		}
	}
	// The scheme is case-insensitive; other schemes do not count.
	req, _ := http.NewRequestWithContext(t.Context(), "POST", base+"/v1/admin-test", nil)
	req.Header.Set("Authorization", "bearer "+testAdminToken)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("lower-case bearer: %v %v", resp, err)
	}
	req.Header.Set("Authorization", "Basic "+testAdminToken)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("Basic: %v %v", resp, err)
	}
}

func TestAdminEndpointsWithoutAToken(t *testing.T) {
	_, base := adminTestNode(t, nil)
	for _, r := range adminRoutes {
		code, _, body := httpDo(t, http.DefaultClient, r.method, base+r.path, "anything")
		if code != http.StatusForbidden || !strings.Contains(body, "admin API disabled: start the agent with --admin-token-file") {
			t.Errorf("%s %s with no admin token configured: %d %s", r.method, r.path, code, body)
		}
	}

	// A dev node, which accepts anyone anyway, leaves them open...
	_, dev := adminTestNode(t, func(c *Config) { c.Dev = true })
	for _, r := range adminRoutes {
		if code, _, body := httpDo(t, http.DefaultClient, r.method, dev+r.path, ""); code != http.StatusOK {
			t.Errorf("dev: %s %s: %d %s", r.method, r.path, code, body)
		}
	}
	// ...unless it was given an admin token.
	_, devToken := adminTestNode(t, func(c *Config) { c.Dev = true; c.AdminToken = []byte(testAdminToken) })
	if code, _, _ := httpDo(t, http.DefaultClient, "POST", devToken+"/v1/admin-test", ""); code != http.StatusUnauthorized {
		t.Errorf("dev with an admin token, no token sent: %d", code)
	}
}

func TestReadEndpointsNeedAToken(t *testing.T) {
	clock := newFakeClock()
	n, base := adminTestNode(t, func(c *Config) { c.AdminToken = []byte(testAdminToken); c.Clock = clock })
	token := func(user string, ttl time.Duration) string {
		s, err := NewToken(testSecret, user, ttl, clock.Now())
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	alice := token("alice", time.Hour)
	expired := token("alice", time.Second)
	clock.Advance(time.Minute)
	connect(t, n, "alice", "phone", map[string]any{"token": alice})
	forged, err := NewToken([]byte("another-secret-of-at-least-32-bytes"), "alice", time.Hour, clock.Now())
	if err != nil {
		t.Fatal(err)
	}

	nodeWide := []string{"/v1/sessions", "/v1/stats", "/v1/read-test"}
	for _, path := range append(nodeWide, "/v1/presence/alice") {
		code, challenge, _ := httpDo(t, http.DefaultClient, "GET", base+path, "")
		if code != http.StatusUnauthorized || !strings.HasPrefix(challenge, "Bearer") {
			t.Errorf("GET %s without a token: %d %q", path, code, challenge)
		}
		if code, _, body := httpDo(t, http.DefaultClient, "GET", base+path, testAdminToken); code != http.StatusOK {
			t.Errorf("GET %s with the admin token: %d %s", path, code, body)
		}
	}
	for _, tc := range []struct {
		name, path, token string
		want              int
	}{
		{"alice's token", "/v1/presence/alice", alice, http.StatusOK},
		{"alice's token for bob", "/v1/presence/bob", alice, http.StatusUnauthorized},
		{"an expired token", "/v1/presence/alice", expired, http.StatusUnauthorized},
		{"a forged token", "/v1/presence/alice", forged, http.StatusUnauthorized},
		{"alice's token for sessions", "/v1/sessions", alice, http.StatusUnauthorized},
		{"alice's token for stats", "/v1/stats", alice, http.StatusUnauthorized},
		{"alice's token for a read route", "/v1/read-test", alice, http.StatusUnauthorized},
		{"alice's token for an admin route", "/debug/pprof/", alice, http.StatusUnauthorized},
	} {
		if code, _, body := httpDo(t, http.DefaultClient, "GET", base+tc.path, tc.token); code != tc.want {
			t.Errorf("%s: GET %s: %d, want %d: %s", tc.name, tc.path, code, tc.want, body)
		}
	}
	var p protocol.Presence
	_, _, body := httpDo(t, http.DefaultClient, "GET", base+"/v1/presence/alice", alice)
	if err := json.Unmarshal([]byte(body), &p); err != nil || !p.Online {
		t.Fatalf("alice's presence with her token: %s", body)
	}
	if code, _, _ := httpDo(t, http.DefaultClient, "GET", base+"/healthz", ""); code != http.StatusOK {
		t.Fatalf("/healthz without a token: %d", code)
	}
}

func TestHTTPOverTLS(t *testing.T) {
	f := newTLSFixture(t)
	n, _ := f.start(t, func(c *Config) { c.HTTPAddr = "127.0.0.1:0" })
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: clientConfig(f.ca)}}
	if code, _, body := httpDo(t, client, "GET", "https://"+n.HTTPAddr().String()+"/healthz", ""); code != http.StatusOK {
		t.Fatalf("https /healthz: %d %s", code, body)
	}
	wrong := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{ServerName: "localhost"}}}
	req, _ := http.NewRequestWithContext(t.Context(), "GET", "https://"+n.HTTPAddr().String()+"/healthz", nil)
	if resp, err := wrong.Do(req); err == nil {
		resp.Body.Close()
		t.Fatal("https with a client that does not trust the CA succeeded")
	}
	if code, _, _ := httpDo(t, http.DefaultClient, "GET", "http://"+n.HTTPAddr().String()+"/healthz", ""); code == http.StatusOK {
		t.Fatal("plain HTTP served on the TLS port")
	}
}

func TestReadAdminTokenFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	os.WriteFile(good, []byte(testAdminToken+" \r\n\n"), 0o600) //nolint:errcheck // read below
	if b, err := ReadAdminTokenFile(good); err != nil || string(b) != testAdminToken {
		t.Fatalf("%q %v", b, err)
	}
	short := filepath.Join(dir, "short")
	os.WriteFile(short, []byte(strings.Repeat("x", 31)+"\n"), 0o600) //nolint:errcheck // read below
	if _, err := ReadAdminTokenFile(short); err == nil || !strings.Contains(err.Error(), "at least 32") {
		t.Fatalf("31 bytes accepted: %v", err)
	}
	if _, err := ReadAdminTokenFile(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("missing file accepted")
	}
	if _, err := New(Config{Name: "n", Dev: true, AdminToken: []byte("short")}); err == nil {
		t.Fatal("Config with a short admin token accepted")
	}
}

// The status page's data endpoints are operator views: the admin token or
// a backend client token reads them, a plain user's token does not; the
// page itself stays open so it can ask for the token.
func TestStatusPageDataNeedsTheAdminToken(t *testing.T) {
	_, base := adminTestNode(t, func(c *Config) { c.AdminToken = []byte(testAdminToken) })
	user, err := NewToken(testSecret, "alice", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, token string
		want        int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"a user's token", user, http.StatusUnauthorized},
		{"the admin token", testAdminToken, http.StatusOK},
	} {
		if code, _, body := httpDo(t, http.DefaultClient, "GET", base+"/v1/ui/summary", tc.token); code != tc.want {
			t.Errorf("summary with %s: %d, want %d: %s", tc.name, code, tc.want, body)
		}
	}
	if code, _, _ := httpDo(t, http.DefaultClient, "GET", base+"/ui/", ""); code != http.StatusOK {
		t.Errorf("the page without a token: %d, want 200", code)
	}
}
