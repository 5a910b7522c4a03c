package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rollcall/rollcall/auth"
	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/protocol"
)

// apiReply is an answer of the backend API.
type apiReply struct {
	code   int
	header http.Header
	body   string
}

// json decodes the answer's body into a map.
func (r apiReply) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(r.body), &m); err != nil {
		t.Fatalf("answer %d is not a JSON object: %q", r.code, r.body)
	}
	return m
}

// errorCode returns the answer's error code, failing unless the body is
// {"error": message, "code": code} with a message.
func (r apiReply) errorCode(t *testing.T) string {
	t.Helper()
	m := r.json(t)
	msg, _ := m["error"].(string)
	code, _ := m["code"].(string)
	if msg == "" || code == "" {
		t.Fatalf("answer %d is not a JSON error: %s", r.code, r.body)
	}
	return code
}

// apiCall makes a request with an optional bearer token and body.
func apiCall(t *testing.T, method, url, token, body string) apiReply {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return apiReply{resp.StatusCode, resp.Header, string(b)}
}

// apiNode starts a node checking tokens, with the admin token, serving
// HTTP, and returns its base URL and tokens: a plain user's, one that
// reads every user, a backend's.
type apiTokens struct{ alice, reader, backend, forged string }

func apiNode(t *testing.T, mut func(*Config)) (*Node, *fakeClock, string, apiTokens) {
	t.Helper()
	n, clock := newAuthNode(t, func(c *Config) {
		c.HTTPAddr = "127.0.0.1:0"
		c.AdminToken = []byte(testAdminToken)
		if mut != nil {
			mut(c)
		}
	})
	s := secretSigner(t)
	now := clock.Now()
	forger := must(auth.NewSecretSigner([]byte(strings.Repeat("k", 32))))
	return n, clock, "http://" + n.HTTPAddr().String(), apiTokens{
		alice:   mint(t, s, auth.TokenSpec{User: "alice"}, now),
		reader:  mint(t, s, auth.TokenSpec{User: "dash", Grants: &auth.GrantsClaim{Read: []string{"*"}}}, now),
		backend: mint(t, s, auth.TokenSpec{User: "svc", Grants: &auth.GrantsClaim{Backend: true}}, now),
		forged:  mint(t, forger, auth.TokenSpec{User: "svc", Grants: &auth.GrantsClaim{Backend: true}}, now),
	}
}

// TestAPIAuthorization: each backend API route refuses a request without
// a token or with one that does not verify (401, a Bearer challenge, a
// JSON error) and one whose grants do not allow it (403 forbidden); read
// routes take a token that reads everyone, backend routes only a backend
// token; the admin token takes every route.
func TestAPIAuthorization(t *testing.T) {
	_, _, base, tok := apiNode(t, nil)
	routes := []struct {
		method, path, body string
		backend            bool
	}{
		{"POST", "/v1/presence", `{"users":["bob"]}`, false},
		{"GET", "/v1/groups/eng", "", false},
		{"GET", "/v1/groups/eng?count_only=1", "", false},
		{"POST", "/v1/users/bob/disconnect", `{}`, true},
		{"POST", "/v1/send", `{"to":"bob","body":"hi"}`, true},
	}
	for _, r := range routes {
		for _, tc := range []struct {
			name, token string
			want        int
		}{
			{"no token", "", http.StatusUnauthorized},
			{"a wrong admin token", strings.Replace(testAdminToken, "a", "b", 1), http.StatusUnauthorized},
			{"a forged backend token", tok.forged, http.StatusUnauthorized},
			{"a plain user's token", tok.alice, http.StatusForbidden},
			{"a token reading everyone", tok.reader, map[bool]int{false: http.StatusOK, true: http.StatusForbidden}[r.backend]},
			{"a backend token", tok.backend, http.StatusOK},
			{"the admin token", testAdminToken, http.StatusOK},
		} {
			got := apiCall(t, r.method, base+r.path, tc.token, r.body)
			if got.code != tc.want {
				t.Errorf("%s %s with %s: %d, want %d: %s", r.method, r.path, tc.name, got.code, tc.want, got.body)
				continue
			}
			switch got.code {
			case http.StatusUnauthorized:
				if code := got.errorCode(t); code != string(protocol.CodeAuthFailed) || !strings.HasPrefix(got.header.Get("WWW-Authenticate"), "Bearer") {
					t.Errorf("%s %s with %s: code %s, challenge %q", r.method, r.path, tc.name, code, got.header.Get("WWW-Authenticate"))
				}
			case http.StatusForbidden:
				if code := got.errorCode(t); code != string(protocol.CodeForbidden) {
					t.Errorf("%s %s with %s: code %s", r.method, r.path, tc.name, code)
				}
			}
		}
	}
}

// TestAPIOpenOnDev: a --dev gateway serves the backend API to anyone.
func TestAPIOpenOnDev(t *testing.T) {
	n := newTestNode(t, func(c *Config) { c.HTTPAddr = "127.0.0.1:0" })
	base := "http://" + n.HTTPAddr().String()
	if got := apiCall(t, "POST", base+"/v1/presence", "", `{"users":["bob"]}`); got.code != http.StatusOK {
		t.Fatalf("dev: %d %s", got.code, got.body)
	}
	if got := apiCall(t, "POST", base+"/v1/send", "", `{"to":"bob","body":1}`); got.code != http.StatusOK {
		t.Fatalf("dev: %d %s", got.code, got.body)
	}
}

// TestAPIPresenceBatch: POST /v1/presence answers each user's presence in
// request order, a repeated user once, as get does.
func TestAPIPresenceBatch(t *testing.T) {
	n, _, base, tok := apiNode(t, nil)
	connect(t, n, "bob", "phone", map[string]any{"token": mint(t, secretSigner(t), auth.TokenSpec{User: "bob"}, n.clock.Now()), "status": "busy"})
	got := apiCall(t, "POST", base+"/v1/presence", tok.backend, `{"users":["carol","bob","carol"]}`)
	if got.code != http.StatusOK {
		t.Fatalf("%d %s", got.code, got.body)
	}
	var reply struct{ Users []protocol.Presence }
	if err := json.Unmarshal([]byte(got.body), &reply); err != nil {
		t.Fatal(err)
	}
	if len(reply.Users) != 2 || reply.Users[0].User != "carol" || reply.Users[0].Online || reply.Users[0].Sessions == nil ||
		reply.Users[1].User != "bob" || !reply.Users[1].Online ||
		len(reply.Users[1].Sessions) != 1 || reply.Users[1].Sessions[0].Device != "phone" || reply.Users[1].Sessions[0].Status != "busy" {
		t.Fatalf("presence %s", got.body)
	}
	// The largest request is allowed: 1,000 users.
	users := make([]string, protocol.MaxUsersPerRequest)
	for i := range users {
		users[i] = fmt.Sprintf("user-%d", i)
	}
	b, _ := json.Marshal(map[string]any{"users": users})
	if got := apiCall(t, "POST", base+"/v1/presence", tok.backend, string(b)); got.code != http.StatusOK || strings.Count(got.body, `"user":`) != len(users) {
		t.Fatalf("1,000 users: %d, %d users", got.code, strings.Count(got.body, `"user":`))
	}
}

// TestAPIBadInput: every backend API route refuses bad input with 400
// (413 for a body over the bound) and a JSON error that says what is
// wrong, and the node serves on.
func TestAPIBadInput(t *testing.T) {
	_, _, base, tok := apiNode(t, nil)
	many := `{"users":[` + strings.Repeat(`"u",`, protocol.MaxUsersPerRequest) + `"u"]}`
	huge := `{"users":["` + strings.Repeat("x", protocol.MaxHTTPBodyBytes) + `"]}`
	bigBody := `{"to":"bob","body":"` + strings.Repeat("x", protocol.MaxSendBodyBytes) + `"}`
	for _, tc := range []struct {
		name, method, path, body string
		want                     int
		says                     string
	}{
		{"no body", "POST", "/v1/presence", "", http.StatusBadRequest, "not JSON"},
		{"not JSON", "POST", "/v1/presence", `{"users":`, http.StatusBadRequest, "not JSON"},
		{"an array", "POST", "/v1/presence", `["bob"]`, http.StatusBadRequest, "not a JSON object"},
		{"two objects", "POST", "/v1/presence", `{"users":["a"]}{}`, http.StatusBadRequest, "not JSON"},
		{"users a string", "POST", "/v1/presence", `{"users":"bob"}`, http.StatusBadRequest, "users is a JSON string, want an array of strings"},
		{"a user a number", "POST", "/v1/presence", `{"users":[7]}`, http.StatusBadRequest, "users"},
		{"no users", "POST", "/v1/presence", `{"users":[]}`, http.StatusBadRequest, "want users"},
		{"1,001 users", "POST", "/v1/presence", many, http.StatusBadRequest, "1001 users; at most 1000 per request"},
		{"an empty user", "POST", "/v1/presence", `{"users":["bob",""]}`, http.StatusBadRequest, "missing user"},
		{"a control character", "POST", "/v1/presence", `{"users":["b\u0001"]}`, http.StatusBadRequest, "control character"},
		{"invalid UTF-8", "POST", "/v1/presence", "{\"users\":[\"\xff\"]}", http.StatusBadRequest, "UTF-8"},
		{"a body over 1 MiB", "POST", "/v1/presence", huge, http.StatusRequestEntityTooLarge, "over 1048576 bytes"},

		{"a limit too large", "GET", "/v1/groups/eng?limit=5001", "", http.StatusBadRequest, "limit must be 0 to 5000"},
		{"a negative limit", "GET", "/v1/groups/eng?limit=-1", "", http.StatusBadRequest, "limit must be 0 to 5000"},
		{"a limit not a number", "GET", "/v1/groups/eng?limit=ten", "", http.StatusBadRequest, "not a number"},
		{"count_only yes", "GET", "/v1/groups/eng?count_only=yes", "", http.StatusBadRequest, "count_only"},
		{"a group too long", "GET", "/v1/groups/" + strings.Repeat("g", 257), "", http.StatusBadRequest, "longer than 256"},
		{"a control character in the group", "GET", "/v1/groups/a%01", "", http.StatusBadRequest, "control character"},
		{"a bad cursor", "GET", "/v1/groups/eng?cursor=%01", "", http.StatusBadRequest, "cursor contains"},

		{"a bad user to disconnect", "POST", "/v1/users/a%01/disconnect", "", http.StatusBadRequest, "control character"},
		{"a device a number", "POST", "/v1/users/bob/disconnect", `{"device":7}`, http.StatusBadRequest, "device is a JSON number, want a string"},
		{"a disconnect body not an object", "POST", "/v1/users/bob/disconnect", `"phone"`, http.StatusBadRequest, "not a JSON object"},

		{"no recipient", "POST", "/v1/send", `{"body":1}`, http.StatusBadRequest, "missing to"},
		{"no message body", "POST", "/v1/send", `{"to":"bob"}`, http.StatusBadRequest, "missing body"},
		{"a message body too large", "POST", "/v1/send", bigBody, http.StatusBadRequest, "at most 65536"},
		{"a recipient too long", "POST", "/v1/send", `{"to":"` + strings.Repeat("b", 257) + `","body":1}`, http.StatusBadRequest, "to longer than 256"},
	} {
		got := apiCall(t, tc.method, base+tc.path, tok.backend, tc.body)
		if got.code != tc.want {
			t.Errorf("%s: %d, want %d: %s", tc.name, got.code, tc.want, got.body)
			continue
		}
		if code := got.errorCode(t); code != string(protocol.CodeBadRequest) || !strings.Contains(got.json(t)["error"].(string), tc.says) {
			t.Errorf("%s: %s, want bad_request saying %q", tc.name, got.body, tc.says)
		}
	}
	if got := apiCall(t, "POST", base+"/v1/presence", tok.backend, `{"users":["bob"]}`); got.code != http.StatusOK {
		t.Fatalf("after the bad input: %d %s", got.code, got.body)
	}
}

// TestAPIGroupPages: GET /v1/groups/{group} pages through the online
// members in user-name order with limit and cursor, as group does, and
// count_only answers the count alone.
func TestAPIGroupPages(t *testing.T) {
	n := newTestNode(t, func(c *Config) { c.HTTPAddr = "127.0.0.1:0" })
	base := "http://" + n.HTTPAddr().String()
	var want []string
	for i := range 7 {
		u := fmt.Sprintf("u%d", i)
		connect(t, n, u, "d", map[string]any{"groups": []string{"eng/backend"}})
		want = append(want, u)
	}
	connect(t, n, "other", "d", map[string]any{"groups": []string{"ops"}})
	path := base + "/v1/groups/" + url.PathEscape("eng/backend")
	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 7 {
			t.Fatalf("too many pages: %v", got)
		}
		r := apiCall(t, "GET", path+"?limit=3&cursor="+url.QueryEscape(cursor), "", "")
		var page struct {
			Online  int
			Members []protocol.Presence
			Next    string
		}
		if r.code != http.StatusOK || json.Unmarshal([]byte(r.body), &page) != nil || page.Online != 7 || len(page.Members) > 3 {
			t.Fatalf("page after %q: %d %s", cursor, r.code, r.body)
		}
		if !strings.Contains(r.body, `"next"`) {
			t.Fatalf("a page without next: %s", r.body)
		}
		for _, m := range page.Members {
			got = append(got, m.User)
		}
		if page.Next == "" {
			break
		}
		cursor = page.Next
	}
	if !slices.Equal(got, want) {
		t.Fatalf("members %v, want %v", got, want)
	}
	r := apiCall(t, "GET", path+"?count_only=1", "", "")
	if m := r.json(t); r.code != http.StatusOK || len(m) != 1 || m["online"] != 7.0 {
		t.Fatalf("count_only: %d %s", r.code, r.body)
	}
	r = apiCall(t, "GET", base+"/v1/groups/nobody-here", "", "")
	if m := r.json(t); r.code != http.StatusOK || m["online"] != 0.0 || m["next"] != "" || len(m["members"].([]any)) != 0 {
		t.Fatalf("an empty group: %d %s", r.code, r.body)
	}
}

// TestAPIDisconnect: POST /v1/users/{user}/disconnect ends the user's
// sessions on their owner: each client gets kicked and its connection
// closes, and each record is written disconnected; a device ends that
// device's session only; a session held for the disconnect grace ends too.
func TestAPIDisconnect(t *testing.T) {
	fc := &fakeCluster{}
	n, _, base, tok := apiNode(t, func(c *Config) {
		c.Cluster = fc
		c.DisconnectGrace = time.Hour
	})
	token := mint(t, secretSigner(t), auth.TokenSpec{User: "alice", Grants: &auth.GrantsClaim{Read: []string{"*"}}}, n.clock.Now())
	phone, _ := connect(t, n, "alice", "phone", map[string]any{"token": token})
	laptop, _ := connect(t, n, "alice", "laptop", map[string]any{"token": token})
	tablet, _ := connect(t, n, "alice", "tablet", map[string]any{"token": token})
	watcher, _ := connect(t, n, "watcher", "w", map[string]any{"token": mint(t, secretSigner(t), auth.TokenSpec{User: "watcher", Grants: &auth.GrantsClaim{Read: []string{"*"}}}, n.clock.Now())})

	r := apiCall(t, "POST", base+"/v1/users/alice/disconnect", tok.backend, `{"device":"phone"}`)
	if m := r.json(t); r.code != http.StatusOK || m["disconnected"] != 1.0 || m["unreached"] != nil {
		t.Fatalf("disconnect phone: %d %s", r.code, r.body)
	}
	if f := phone.expectError(protocol.CodeKicked); f.str("message") == "" {
		t.Fatalf("kicked without a message: %v", f)
	}
	phone.expectClosed()
	if s, _ := sessionOf(n, crdt.Key{User: "alice", Device: "phone"}); s.State != crdt.StateDisconnected {
		t.Fatalf("the kicked session's record: %+v", s)
	}
	if f := laptop.call(map[string]any{"op": "hb"}); f.str("op") != protocol.OpHB { // the others stay
		t.Fatalf("the laptop after the phone's kick: %v", f)
	}

	// The tablet drops its connection: its session is held for the grace,
	// and a disconnect ends it with the laptop's, at once.
	tablet.nc.Close()
	waitFor(t, "the tablet's connection gone", func() bool { return n.Stats().Connections == 2 })
	if !presenceOf(n, "alice").Online {
		t.Fatal("alice offline during the grace")
	}
	r = apiCall(t, "POST", base+"/v1/users/alice/disconnect", testAdminToken, "")
	if m := r.json(t); r.code != http.StatusOK || m["disconnected"] != 2.0 {
		t.Fatalf("disconnect alice: %d %s", r.code, r.body)
	}
	laptop.expectError(protocol.CodeKicked)
	laptop.expectClosed()
	if p := presenceOf(n, "alice"); p.Online {
		t.Fatalf("alice after the disconnect: %+v", p)
	}
	for _, d := range []string{"laptop", "tablet"} {
		if s, _ := sessionOf(n, crdt.Key{User: "alice", Device: d}); s.State != crdt.StateDisconnected {
			t.Fatalf("%s's record: %+v", d, s)
		}
	}
	// Written by their owner, and published.
	kicked := 0
	for _, d := range fc.published() {
		if s := d.Session; s != nil && s.User == "alice" && s.State == crdt.StateDisconnected && s.Gateway == "n1" {
			kicked++
		}
	}
	if kicked != 3 {
		t.Fatalf("published %d disconnects of alice, want 3", kicked)
	}
	if got := n.stats.m.disconnects[codeIndex(protocol.CodeKicked)].Load(); got != 3 {
		t.Fatalf("disconnects counted as kicked: %d", got)
	}
	// Nothing left to end.
	r = apiCall(t, "POST", base+"/v1/users/alice/disconnect", tok.backend, `{}`)
	if m := r.json(t); r.code != http.StatusOK || m["disconnected"] != 0.0 {
		t.Fatalf("disconnect again: %d %s", r.code, r.body)
	}
	if f := watcher.call(map[string]any{"op": "hb"}); f.str("op") != protocol.OpHB {
		t.Fatalf("the watcher: %v", f)
	}
	checkInvariants(t, n)
}

// TestAPIDisconnectRemote: a session on another gateway is ended through
// the cluster (Kicker); a gateway that cannot be asked is listed as
// unreached.
func TestAPIDisconnectRemote(t *testing.T) {
	kc := &kickCluster{ended: map[string]int{"n2": 1}}
	n := newTestNode(t, func(c *Config) {
		c.HTTPAddr = "127.0.0.1:0"
		c.Cluster = kc
	})
	rm, rm3 := newRemote(t, "n2"), newRemote(t, "n3")
	if err := n.ApplyDeltas([]crdt.Delta{rm.put("bob", "phone", 1, crdt.StateActive, crdt.StatusAvailable),
		rm3.put("bob", "laptop", 1, crdt.StateActive, crdt.StatusAvailable)}); err != nil {
		t.Fatal(err)
	}
	r := apiCall(t, "POST", "http://"+n.HTTPAddr().String()+"/v1/users/bob/disconnect", "", "")
	m := r.json(t)
	if r.code != http.StatusOK || m["disconnected"] != 1.0 || fmt.Sprint(m["unreached"]) != "[n3]" {
		t.Fatalf("disconnect: %d %s", r.code, r.body)
	}
	if got := kc.asked(); !slices.Equal(got, []string{"n2 bob ", "n3 bob "}) {
		t.Fatalf("kicks asked: %v", got)
	}
	// A device's session: only its owner is asked.
	apiCall(t, "POST", "http://"+n.HTTPAddr().String()+"/v1/users/bob/disconnect", "", `{"device":"phone"}`)
	if got := kc.asked(); !slices.Equal(got, []string{"n2 bob ", "n2 bob phone", "n3 bob "}) {
		t.Fatalf("kicks asked: %v", got)
	}
}

// kickCluster is a fakeCluster that kicks: each gateway in ended ends that
// many sessions; any other fails.
type kickCluster struct {
	fakeCluster
	ended map[string]int
	kicks []string
}

var _ Kicker = (*kickCluster)(nil)

func (k *kickCluster) Kick(_ context.Context, gateway, user, device string) (int, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.kicks = append(k.kicks, gateway+" "+user+" "+device)
	slices.Sort(k.kicks)
	if n, ok := k.ended[gateway]; ok {
		return n, nil
	}
	return 0, errors.New("no such gateway")
}

func (k *kickCluster) asked() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.kicks)
}

// TestAPISend: POST /v1/send delivers a message to every active session
// of the recipient, from the token's subject, and answers how many it
// reached.
func TestAPISend(t *testing.T) {
	n, _, base, tok := apiNode(t, nil)
	bobToken := mint(t, secretSigner(t), auth.TokenSpec{User: "bob"}, n.clock.Now())
	phone, _ := connect(t, n, "bob", "phone", map[string]any{"token": bobToken})
	laptop, _ := connect(t, n, "bob", "laptop", map[string]any{"token": bobToken})
	r := apiCall(t, "POST", base+"/v1/send", tok.backend, `{"to":"bob","body":{"text":"deploy done"}}`)
	if m := r.json(t); r.code != http.StatusOK || m["delivered"] != 2.0 {
		t.Fatalf("send: %d %s", r.code, r.body)
	}
	for _, c := range []*client{phone, laptop} {
		f := c.expect(protocol.OpMessage)
		if f.str("from") != "svc" || f.str("from_device") != "" || fmt.Sprint(f["body"]) != "map[text:deploy done]" {
			t.Fatalf("message %v", f)
		}
	}
	// With the admin token the message comes from no one.
	r = apiCall(t, "POST", base+"/v1/send", testAdminToken, `{"to":"bob","body":"hi"}`)
	if m := r.json(t); r.code != http.StatusOK || m["delivered"] != 2.0 {
		t.Fatalf("send: %d %s", r.code, r.body)
	}
	if f := phone.expect(protocol.OpMessage); f.str("from") != "" || f.str("body") != "hi" {
		t.Fatalf("message %v", f)
	}
	// Nobody to reach.
	r = apiCall(t, "POST", base+"/v1/send", tok.backend, `{"to":"carol","body":"hi"}`)
	if m := r.json(t); r.code != http.StatusOK || m["delivered"] != 0.0 {
		t.Fatalf("send to carol: %d %s", r.code, r.body)
	}
}

// TestAPIRateLimit: the backend API's requests from one address share its
// allowance (RequestRate, RequestBurst); past it, 429 rate_limited with
// Retry-After; the allowance refills with time.
func TestAPIRateLimit(t *testing.T) {
	_, clock, base, tok := apiNode(t, func(c *Config) {
		c.RequestRate = 1
		c.RequestBurst = 3
	})
	paths := []string{"/v1/groups/eng", "/v1/groups/ops", "/v1/groups/eng?count_only=1"}
	for _, p := range paths {
		if r := apiCall(t, "GET", base+p, tok.backend, ""); r.code != http.StatusOK {
			t.Fatalf("%s: %d %s", p, r.code, r.body)
		}
	}
	r := apiCall(t, "POST", base+"/v1/send", tok.backend, `{"to":"bob","body":1}`)
	if r.code != http.StatusTooManyRequests || r.errorCode(t) != string(protocol.CodeRateLimited) || r.header.Get("Retry-After") != "1" {
		t.Fatalf("past the burst: %d %v %s", r.code, r.header, r.body)
	}
	// An unauthenticated request counts too: it costs a token check.
	if r := apiCall(t, "GET", base+"/v1/groups/eng", "", ""); r.code != http.StatusTooManyRequests {
		t.Fatalf("past the burst without a token: %d %s", r.code, r.body)
	}
	clock.Advance(time.Second)
	if r := apiCall(t, "GET", base+"/v1/groups/eng", tok.backend, ""); r.code != http.StatusOK {
		t.Fatalf("a second later: %d %s", r.code, r.body)
	}
	// Other routes are not limited by it.
	if r := apiCall(t, "GET", base+"/v1/presence/bob", tok.backend, ""); r.code != http.StatusOK {
		t.Fatalf("GET /v1/presence/bob: %d %s", r.code, r.body)
	}
}

// BenchmarkAPIPresenceBatch: POST /v1/presence of 1,000 users, half of
// them online, through the handler (no network): the cost of one batch.
func BenchmarkAPIPresenceBatch(b *testing.B) {
	n := newTestNode(b, func(c *Config) { c.RequestRate = -1 }) // every request from one address
	users := make([]string, protocol.MaxUsersPerRequest)
	var ds []crdt.Delta
	rm := &remote{r: must(crdt.NewReplica(crdt.Config{Self: crdt.Origin{Node: "n2", Incarnation: 1}}))}
	for i := range users {
		users[i] = fmt.Sprintf("user-%04d", i)
		if i%2 == 0 {
			d, err := rm.r.PutLocal(crdt.Session{User: users[i], Device: "d", ID: "s" + users[i], Epoch: 1, State: crdt.StateActive,
				ExpiresAt: time.Now().Add(time.Hour).UnixNano()}, time.Now().UnixNano())
			if err != nil {
				b.Fatal(err)
			}
			ds = append(ds, d)
		}
	}
	if err := n.ApplyDeltas(ds); err != nil {
		b.Fatal(err)
	}
	body, _ := json.Marshal(map[string]any{"users": users})
	h := n.httpHandler()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		req := httptest.NewRequest("POST", "/v1/presence", bytes.NewReader(body))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatalf("%d %s", w.Code, w.Body)
		}
	}
}
