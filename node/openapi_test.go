package node

import (
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Routes of the HTTP port that openapi.json leaves out: they serve pages,
// scripts, the WebSocket upgrade, the status page's own data and Go's
// profiler, not the JSON API.
var openAPIUndocumented = []string{"/ui/", "/v1/ui/", "/ws", "/client.js", "/demo/", "/debug/pprof/"}

// openAPIOperations returns the operations openapi.json documents, as
// ServeMux patterns ("GET /v1/groups/{group}").
func openAPIOperations(t *testing.T) []string {
	t.Helper()
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(openAPIDoc, &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Fatalf("openapi.json is OpenAPI %q, want 3.x", doc.OpenAPI)
	}
	var ops []string
	for path, item := range doc.Paths {
		for method, op := range item {
			var o struct {
				OperationID string          `json:"operationId"`
				Responses   json.RawMessage `json:"responses"`
			}
			if err := json.Unmarshal(op, &o); err != nil || o.OperationID == "" || len(o.Responses) == 0 {
				t.Errorf("%s %s: an operation without an operationId or responses", method, path)
			}
			ops = append(ops, strings.ToUpper(method)+" "+path)
		}
	}
	slices.Sort(ops)
	return ops
}

// TestOpenAPIMatchesRoutes keeps openapi.json in step with the routes the
// HTTP port registers: every route (but openAPIUndocumented's) is
// documented with its method, every documented operation is registered,
// and each is served: a request reaches its handler, and another method
// on a documented path gets 405.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	n := newTestNode(t, func(c *Config) { c.HTTPAddr = "127.0.0.1:0" })
	var routes []string
	for _, p := range n.httpMux().patterns {
		method, path, ok := strings.Cut(p, " ")
		if !ok {
			path = method
		}
		if slices.ContainsFunc(openAPIUndocumented, func(u string) bool { return strings.HasPrefix(path, u) }) {
			continue
		}
		if !ok {
			t.Errorf("route %q has no method", p)
			continue
		}
		routes = append(routes, p)
	}
	slices.Sort(routes)
	ops := openAPIOperations(t)
	for _, r := range routes {
		if !slices.Contains(ops, r) {
			t.Errorf("route %s is not in openapi.json", r)
		}
	}
	for _, op := range ops {
		if !slices.Contains(routes, op) {
			t.Errorf("openapi.json documents %s, which is not served", op)
		}
	}

	base := "http://" + n.HTTPAddr().String()
	param := regexp.MustCompile(`\{[^}]+\}`)
	methods := map[string][]string{}
	for _, op := range ops {
		method, path, _ := strings.Cut(op, " ")
		methods[path] = append(methods[path], method)
		got := apiCall(t, method, base+param.ReplaceAllString(path, "x"), "", "")
		if got.code == http.StatusNotFound || got.code == http.StatusMethodNotAllowed {
			t.Errorf("%s: %d %s", op, got.code, got.body)
		}
	}
	for path, ms := range methods {
		for _, m := range []string{"GET", "POST", "PUT", "DELETE"} {
			if slices.Contains(ms, m) {
				continue
			}
			if got := apiCall(t, m, base+param.ReplaceAllString(path, "x"), "", ""); got.code != http.StatusMethodNotAllowed {
				t.Errorf("%s %s, not documented: %d, want 405", m, path, got.code)
			}
		}
	}
}
