package node

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/rollcall/rollcall/protocol"
)

func getJSON(t *testing.T, url string, wantCode int, into any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != wantCode {
		t.Fatalf("GET %s: %d, want %d", url, resp.StatusCode, wantCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

func TestHTTP(t *testing.T) {
	n := newTestNode(t, func(c *Config) { c.HTTPAddr = "127.0.0.1:0" })
	base := "http://" + n.HTTPAddr().String()
	a, _ := connect(t, n, "alice", "phone", map[string]any{"groups": []string{"g"}})
	a.ok(map[string]any{"op": "status", "status": "busy"})

	var health map[string]string
	getJSON(t, base+"/healthz", http.StatusOK, &health)
	if health["status"] != "ok" || health["node"] != "n1" {
		t.Fatalf("healthz %v", health)
	}
	var p protocol.Presence
	getJSON(t, base+"/v1/presence/alice", http.StatusOK, &p)
	if !p.Online || p.Status != "available" || len(p.Sessions) != 1 || p.Sessions[0].Status != "busy" || p.Version == 0 {
		t.Fatalf("presence %+v", p)
	}
	var sessions struct {
		Node     string
		Sessions []LocalSession
	}
	getJSON(t, base+"/v1/sessions", http.StatusOK, &sessions)
	if len(sessions.Sessions) != 1 || sessions.Sessions[0].User != "alice" || sessions.Sessions[0].Groups[0] != "g" {
		t.Fatalf("sessions %+v", sessions)
	}
	var st Stats
	getJSON(t, base+"/v1/stats", http.StatusOK, &st)
	if st.Sessions != 1 || st.SessionsOpened != 1 || st.Replica.Active != 1 || st.Node != "n1" {
		t.Fatalf("stats %+v", st)
	}
	resp, err := http.Post(base+"/healthz", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST /healthz: %d", resp.StatusCode)
	}
	go n.Drain(t.Context())
	a.expectError(protocol.CodeShuttingDown)
	getJSON(t, base+"/healthz", http.StatusServiceUnavailable, &health)
	if health["status"] != "draining" {
		t.Fatalf("healthz %v", health)
	}
}
