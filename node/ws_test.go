package node

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/protocol"
)

// The protocol suite runs over either transport: -transport=ws (or
// ROLLCALL_TEST_TRANSPORT=ws) makes dial connect over a WebSocket to GET
// /ws on the node's HTTP address instead of TCP to its client address
// (make test runs both). -transport=tcpgo dials TCP to a node that serves
// it with goroutines (Config.GoroutineIO) instead of the event loop;
// -transport=uring dials TCP to a node whose event loop reads with io_uring
// (Config.IOUring).
var transportFlag = flag.String("transport", "", "transport the protocol tests dial: tcp (default), ws, tcpgo (TCP served by goroutines) or uring (the event loop in its io_uring mode); also ROLLCALL_TEST_TRANSPORT")

// testTransport is the transport under test, set by TestMain.
var testTransport = "tcp"

func TestMain(m *testing.M) {
	flag.Parse()
	if v := os.Getenv("ROLLCALL_TEST_TRANSPORT"); v != "" {
		testTransport = v
	}
	if *transportFlag != "" {
		testTransport = *transportFlag
	}
	if testTransport != "tcp" && testTransport != "ws" && testTransport != "tcpgo" && testTransport != "uring" {
		fmt.Fprintf(os.Stderr, "unknown -transport %q: tcp, ws, tcpgo or uring\n", testTransport)
		os.Exit(2)
	}
	os.Exit(m.Run())
}

// wsURL is the WebSocket endpoint of n.
func wsURL(n *Node) string { return "ws://" + n.HTTPAddr().String() + "/ws" }

// dialWS connects a test client over a WebSocket, failing the test when
// the upgrade fails.
func dialWS(t testing.TB, url string, header http.Header) *client {
	t.Helper()
	c, resp, err := tryDialWS(t, url, &websocket.DialOptions{HTTPHeader: header})
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		t.Fatalf("websocket dial %s: %v (HTTP %d)", url, err, status)
	}
	return c
}

// tryDialWS connects a test client over a WebSocket; the client reads and
// writes lines through the same adapter the gateway serves (ws.go).
func tryDialWS(t testing.TB, url string, opts *websocket.DialOptions) (*client, *http.Response, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ws, resp, err := websocket.Dial(ctx, url, opts)
	if err != nil {
		return nil, resp, err
	}
	ws.SetReadLimit(-1)
	nc := newWSConn(ws, wsAddr(url), wsAddr(url), func() error { go ws.CloseNow(); return nil }) //nolint:errcheck // best effort
	go nc.pump()
	t.Cleanup(func() { nc.Close(); nc.closeNow() })
	return newClient(t, nc), resp, nil
}

type wsAddr string

func (a wsAddr) Network() string { return "websocket" }
func (a wsAddr) String() string  { return string(a) }

// TestWSOrigins: a browser page from an origin not allowed is refused the
// upgrade (403); same-origin and listed origins are served; a client
// without an Origin header (not a browser) is served.
func TestWSOrigins(t *testing.T) {
	strict := newTestNode(t, func(c *Config) {
		c.Dev = false
		c.Secret = testSecret
		c.HTTPAddr = "127.0.0.1:0"
	})
	listed := newTestNode(t, func(c *Config) {
		c.HTTPAddr = "127.0.0.1:0"
		c.WSAllowedOrigins = []string{"app.example.com", "*.example.org"}
	})
	for _, tc := range []struct {
		name   string
		n      *Node
		origin string
		ok     bool
	}{
		{"other origin, default", strict, "https://evil.example.com", false},
		{"same origin, default", strict, "http://" + strict.HTTPAddr().String(), true},
		{"no origin", strict, "", true},
		{"listed", listed, "https://app.example.com", true},
		{"listed pattern", listed, "https://eu.example.org", true},
		{"not listed", listed, "https://evil.example.com", false},
		{"listed host, other subdomain", listed, "https://x.app.example.com", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			if tc.origin != "" {
				h.Set("Origin", tc.origin)
			}
			c, resp, err := tryDialWS(t, wsURL(tc.n), &websocket.DialOptions{HTTPHeader: h})
			if !tc.ok {
				if err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
					t.Fatalf("want 403, got %v %v", resp, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("dial: %v", err)
			}
			// Served: the gateway answers (a hello without a token on the
			// strict node fails authentication, which is an answer).
			c.send(map[string]any{"op": "hb", "id": 1})
			c.expectError(protocol.CodeNotAuthenticated)
		})
	}
}

// TestWSOriginsConfig: "*" allows every origin; a Dev node given no list
// allows every origin, a non-Dev one only its own.
func TestWSOriginsConfig(t *testing.T) {
	for _, tc := range []struct {
		dev     bool
		origins []string
		any     bool
	}{
		{false, nil, false},
		{true, nil, true},
		{false, []string{"*"}, true},
		{true, []string{"app.example.com"}, false},
	} {
		n := &Node{cfg: Config{Dev: tc.dev, WSAllowedOrigins: tc.origins}}
		if got := n.wsAcceptOptions().InsecureSkipVerify; got != tc.any {
			t.Errorf("dev %v origins %q: any origin %v, want %v", tc.dev, tc.origins, got, tc.any)
		}
	}
}

// TestWSCloseIsCleanDisconnect: a WebSocket the client closes ends its
// session as a clean disconnect, as a TCP close does.
func TestWSCloseIsCleanDisconnect(t *testing.T) {
	n := newTestNode(t, func(c *Config) { c.HTTPAddr = "127.0.0.1:0" })
	a := dialWS(t, wsURL(n), nil)
	a.hello("alice", "phone")
	w := dialWS(t, wsURL(n), nil)
	w.hello("watcher", "d")
	w.ok(map[string]any{"op": "sub", "users": []string{"alice"}})
	if e := w.expectEvent("alice"); e["online"] != true {
		t.Fatalf("snapshot %v", e)
	}
	a.nc.Close() // the close handshake, status 1000
	if e := w.expectEvent("alice"); e["online"] != false {
		t.Fatalf("event %v", e)
	}
	s, _ := sessionOf(n, crdt.Key{User: "alice", Device: "phone"})
	if s.State != crdt.StateDisconnected {
		t.Fatalf("alice's record %+v", s)
	}
	waitFor(t, "the connection to be forgotten", func() bool { return n.Stats().Connections == 1 })
	checkInvariants(t, n)
}

// TestWSSilentExpires: a WebSocket that stays open but sends nothing
// expires by the deadline sweeper, with the expired error.
func TestWSSilentExpires(t *testing.T) {
	clock := newFakeClock()
	n := newTestNode(t, func(c *Config) {
		c.HTTPAddr = "127.0.0.1:0"
		c.Clock = clock
		c.Heartbeat = time.Second
		c.Timeout = 3 * time.Second
	})
	bob := dialWS(t, wsURL(n), nil)
	bob.hello("bob", "phone")
	start := clock.Now()
	waitSweeps(t, n)
	clock.Advance(2 * time.Second)
	waitSweeps(t, n)
	checkActive(t, n, "bob")
	clock.Advance(time.Second)
	waitSweeps(t, n)
	checkExpired(t, n, bob, start.Add(3*time.Second))
}

// TestWSUpgradeToken: a token in the upgrade request (Authorization:
// Bearer, or ?token=) authenticates a hello without one, verified as a
// hello token is; a forged one is refused.
func TestWSUpgradeToken(t *testing.T) {
	clock := newFakeClock()
	n := newTestNode(t, func(c *Config) {
		c.Dev = false
		c.Secret = testSecret
		c.Clock = clock
		c.Timeout = time.Hour
		c.HTTPAddr = "127.0.0.1:0"
	})
	good, err := NewToken(testSecret, "alice", time.Hour, clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	forged, _ := NewToken([]byte(strings.Repeat("k", 32)), "alice", time.Hour, clock.Now())
	bearer := func(tok string) http.Header { return http.Header{"Authorization": {"Bearer " + tok}} }

	bearerOK := dialWS(t, wsURL(n), bearer(good))
	bearerOK.hello("alice", "a")
	queryOK := dialWS(t, wsURL(n)+"?token="+good, nil)
	queryOK.hello("alice", "b")

	for name, c := range map[string]*client{
		"forged bearer":          dialWS(t, wsURL(n), bearer(forged)),
		"forged query":           dialWS(t, wsURL(n)+"?token="+forged, nil),
		"token for another user": dialWS(t, wsURL(n)+"?token="+good, nil),
		"none":                   dialWS(t, wsURL(n), nil),
	} {
		user := "alice"
		if strings.Contains(name, "another") {
			user = "bob"
		}
		c.send(map[string]any{"op": "hello", "user": user})
		if f := c.recv(); f.str("code") != string(protocol.CodeAuthFailed) {
			t.Fatalf("%s: want auth_failed, got %v", name, f)
		}
		c.expectClosed()
	}
	if got := n.Stats().AuthFailed; got != 4 {
		t.Fatalf("auth failures %d, want 4", got)
	}
}

// TestWSFraming: each reply is its own text message without a newline; a
// message without a newline is one request, and one with several
// newline-terminated requests is each of them; a binary message closes the
// WebSocket with status 1003.
func TestWSFraming(t *testing.T) {
	n := newTestNode(t, func(c *Config) { c.HTTPAddr = "127.0.0.1:0" })
	ctx := t.Context()
	ws, _, err := websocket.Dial(ctx, wsURL(n), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	read := func() string {
		t.Helper()
		rctx, cancel := context.WithTimeout(ctx, ioWait)
		defer cancel()
		typ, b, err := ws.Read(rctx)
		if err != nil || typ != websocket.MessageText {
			t.Fatalf("read: %v %v", typ, err)
		}
		return string(b)
	}
	write := func(typ websocket.MessageType, s string) {
		t.Helper()
		if err := ws.Write(ctx, typ, []byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	write(websocket.MessageText, `{"op":"hello","user":"alice","id":1}`)
	if m := read(); !strings.HasPrefix(m, `{"op":"welcome"`) || strings.HasSuffix(m, "\n") {
		t.Fatalf("welcome message %q", m)
	}
	write(websocket.MessageText, "{\"op\":\"hb\",\"id\":2}\n{\"op\":\"hb\",\"id\":3}\n")
	for _, id := range []string{`"id":2`, `"id":3`} {
		if m := read(); !strings.Contains(m, id) || strings.Contains(m, "\n") {
			t.Fatalf("want one reply with %s, got %q", id, m)
		}
	}
	write(websocket.MessageBinary, `{"op":"hb","id":4}`)
	rctx, cancel := context.WithTimeout(ctx, ioWait)
	defer cancel()
	_, _, err = ws.Read(rctx)
	if websocket.CloseStatus(err) != websocket.StatusUnsupportedData {
		t.Fatalf("after a binary message: %v, want close status 1003", err)
	}
}

// TestWSOverTLS: with TLS on the HTTP port, /ws is served as wss, and a
// session works as over TCP.
func TestWSOverTLS(t *testing.T) {
	f := newTLSFixture(t)
	n, _ := f.start(t, func(c *Config) { c.HTTPAddr = "127.0.0.1:0" })
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: clientConfig(f.ca)}}
	url := "wss://" + n.HTTPAddr().String() + "/ws"
	c, _, err := tryDialWS(t, url, &websocket.DialOptions{HTTPClient: hc})
	if err != nil {
		t.Fatalf("wss dial: %v", err)
	}
	c.hello("alice", "web")
	if f := c.call(map[string]any{"op": "get", "users": []string{"alice"}}); f.str("op") != protocol.OpPresence {
		t.Fatalf("get: %v", f)
	}
	if _, _, err := tryDialWS(t, "ws://"+n.HTTPAddr().String()+"/ws", nil); err == nil {
		t.Fatal("plain ws accepted on the TLS port")
	}
}

// TestWSDedicatedListener: Config.WSAddr serves /ws and nothing else, on
// a gateway without an HTTP port.
func TestWSDedicatedListener(t *testing.T) {
	n := newTestNode(t, func(c *Config) {
		c.HTTPAddr = ""
		c.WSAddr = "127.0.0.1:0"
	})
	c := dialWS(t, "ws://"+n.WSAddr().String()+"/ws", nil)
	c.hello("alice", "web")
	if f := c.call(map[string]any{"op": "get", "users": []string{"alice"}}); f.str("op") != protocol.OpPresence {
		t.Fatalf("get: %v", f)
	}
	resp, err := http.Get("http://" + n.WSAddr().String() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("/healthz on the WebSocket listener: %d, want 404", resp.StatusCode)
	}
}
