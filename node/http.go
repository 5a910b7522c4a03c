package node

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"

	"go.uber.org/zap"
)

// HTTP endpoints (who may call them: httpauth.go):
//
//	GET /healthz              open, liveness: 200 {"status":"ok"}; 503 {"status":"draining"}
//	GET /readyz               open, readiness: 200 {"status":"ready"}; 503 with a
//	                          status (starting, joining, draining) and reason
//	GET /v1/presence/{user}   read: the user's Presence
//	GET /v1/sessions          read: the active sessions this node owns
//	GET /v1/stats             read: Stats
//	GET /v1/events            read (each user, the group): a text/event-stream
//	                          of presence events (events.go)
//	POST /v1/presence, GET /v1/groups/{group}, POST /v1/send,
//	POST /v1/users/{user}/disconnect, GET /v1/openapi.json
//	                          the backend API (httpapi.go)
//	GET /ws                   the client protocol over WebSocket (ws.go);
//	                          authenticated by hello, as on TCP
//	GET /client.js, /demo/    open: the browser client and its demo (jsclient.go)
//	/debug/pprof/...          admin: net/http/pprof
//
// plus Config.HTTPHandlers (open), ReadHTTPHandlers (read) and
// AdminHTTPHandlers (admin).

func (n *Node) httpHandler() http.Handler { return n.httpMux() }

// httpMux returns the HTTP port's routes, with the patterns registered.
func (n *Node) httpMux() *routeMux {
	mux := &routeMux{ServeMux: http.NewServeMux()}
	n.handleUI(mux) // the status page and its data endpoints (ui.go)
	mux.HandleFunc("GET /healthz", n.handleHealthz)
	mux.HandleFunc("GET /readyz", n.handleReadyz)
	mux.Handle("GET /v1/presence/{user}", n.requireRead(http.HandlerFunc(n.handlePresenceHTTP), pathUser))
	mux.Handle("GET /v1/sessions", n.requireRead(http.HandlerFunc(n.handleSessionsHTTP), nodeWide))
	mux.Handle("GET /v1/stats", n.requireRead(http.HandlerFunc(n.handleStatsHTTP), nodeWide))
	mux.Handle("GET /v1/regions", n.requireRead(http.HandlerFunc(n.handleRegionsHTTP), nodeWide))
	mux.HandleFunc("GET /v1/events", n.handleEvents) // checks its own reads (events.go)
	mux.HandleFunc("GET /ws", n.handleWS)
	handleJSClient(mux) // GET /client.js and GET /demo/, open (jsclient.go)
	n.handleAPI(mux)    // the backend API (httpapi.go)
	n.handlePprof(mux)
	for pattern, h := range n.cfg.HTTPHandlers {
		mux.Handle(pattern, h)
	}
	for pattern, h := range n.cfg.ReadHTTPHandlers {
		mux.Handle(pattern, n.requireRead(h, nodeWide))
	}
	for pattern, h := range n.cfg.AdminHTTPHandlers {
		mux.Handle(pattern, n.requireAdmin(h))
	}
	return mux
}

// routeMux is a ServeMux that keeps the patterns registered on it: the
// routes a test compares with the OpenAPI description (openapi.json).
type routeMux struct {
	*http.ServeMux
	patterns []string
}

func (m *routeMux) Handle(pattern string, h http.Handler) {
	m.patterns = append(m.patterns, pattern)
	m.ServeMux.Handle(pattern, h)
}

func (m *routeMux) HandleFunc(pattern string, h func(http.ResponseWriter, *http.Request)) {
	m.Handle(pattern, http.HandlerFunc(h))
}

func (n *Node) handleHealthz(w http.ResponseWriter, _ *http.Request) {
	lk := lockOf(&n.mu)
	defer lk.unlock()
	draining := n.draining
	lk.unlock()
	if draining {
		n.writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "draining", "node": n.cfg.Name})
		return
	}
	n.writeJSON(w, http.StatusOK, map[string]string{"status": "ok", "node": n.cfg.Name})
}

// handleReadyz answers whether a load balancer should send this gateway
// new clients (Node.Readiness); /healthz stays liveness only.
func (n *Node) handleReadyz(w http.ResponseWriter, _ *http.Request) {
	ready, status, reason := n.Readiness()
	body := map[string]string{"status": status, "node": n.cfg.Name}
	if !ready {
		body["reason"] = reason
		n.writeJSON(w, http.StatusServiceUnavailable, body)
		return
	}
	n.writeJSON(w, http.StatusOK, body)
}

func (n *Node) handlePresenceHTTP(w http.ResponseWriter, r *http.Request) {
	user := r.PathValue("user")
	if rerr := checkName("user", user); rerr != nil {
		n.writeJSON(w, http.StatusBadRequest, map[string]string{"error": rerr.msg})
		return
	}
	who := n.httpViewer(r)
	lk := lockOf(&n.mu)
	defer lk.unlock()
	v := n.nextVersionLocked()
	p := presenceJSON(who.view(n.replica.Presence(user, n.clock.Now().UnixNano())), v)
	lk.unlock()
	n.writeJSON(w, http.StatusOK, p)
}

// LocalSession describes one active session this node owns (GET
// /v1/sessions).
type LocalSession struct {
	User    string   `json:"user"`
	Device  string   `json:"device"`
	Session string   `json:"session"`
	Epoch   uint64   `json:"epoch"`
	Status  string   `json:"status"`
	Groups  []string `json:"groups"`
	Remote  string   `json:"remote"`
}

// LocalSessions returns the active sessions this node owns, sorted by user
// and device.
func (n *Node) LocalSessions() []LocalSession {
	lk := lockOf(&n.mu)
	defer lk.unlock()
	out := make([]LocalSession, 0, n.localCount)
	for _, devs := range n.local {
		for _, c := range devs {
			s := c.sess
			groups := make([]string, len(s.groups)) // [] in JSON when there are none, never null
			copy(groups, s.groups)
			out = append(out, LocalSession{User: s.user, Device: s.device, Session: s.id, Epoch: s.epoch,
				Status: s.status.String(), Groups: groups, Remote: c.remote})
		}
	}
	lk.unlock()
	slices.SortFunc(out, func(a, b LocalSession) int {
		if c := strings.Compare(a.User, b.User); c != 0 {
			return c
		}
		return strings.Compare(a.Device, b.Device)
	})
	return out
}

func (n *Node) handleSessionsHTTP(w http.ResponseWriter, _ *http.Request) {
	n.writeJSON(w, http.StatusOK, map[string]any{"node": n.cfg.Name, "sessions": n.LocalSessions()})
}

func (n *Node) handleStatsHTTP(w http.ResponseWriter, _ *http.Request) {
	n.writeJSON(w, http.StatusOK, n.Stats())
}

func (n *Node) writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		n.log.Debug("http write failed", zap.Error(err))
	}
}
