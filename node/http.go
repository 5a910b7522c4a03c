package node

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"

	"go.uber.org/zap"
)

// HTTP endpoints, read-only:
//
//	GET /healthz              200 {"status":"ok"}; 503 {"status":"draining"}
//	GET /v1/presence/{user}   the user's Presence
//	GET /v1/sessions          the active sessions this node owns
//	GET /v1/stats             Stats

func (n *Node) httpHandler() http.Handler {
	mux := http.NewServeMux()
	n.handleUI(mux) // the status page and its data endpoints (ui.go)
	mux.HandleFunc("GET /healthz", n.handleHealthz)
	mux.HandleFunc("GET /v1/presence/{user}", n.handlePresenceHTTP)
	mux.HandleFunc("GET /v1/sessions", n.handleSessionsHTTP)
	mux.HandleFunc("GET /v1/stats", n.handleStatsHTTP)
	for pattern, h := range n.cfg.HTTPHandlers {
		mux.Handle(pattern, h)
	}
	return mux
}

func (n *Node) handleHealthz(w http.ResponseWriter, _ *http.Request) {
	n.mu.Lock()
	draining := n.draining
	n.mu.Unlock()
	if draining {
		n.writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "draining", "node": n.cfg.Name})
		return
	}
	n.writeJSON(w, http.StatusOK, map[string]string{"status": "ok", "node": n.cfg.Name})
}

func (n *Node) handlePresenceHTTP(w http.ResponseWriter, r *http.Request) {
	user := r.PathValue("user")
	if rerr := checkName("user", user); rerr != nil {
		n.writeJSON(w, http.StatusBadRequest, map[string]string{"error": rerr.msg})
		return
	}
	n.mu.Lock()
	v := n.nextVersionLocked()
	p := presenceJSON(n.replica.Presence(user), v)
	n.mu.Unlock()
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
	n.mu.Lock()
	out := make([]LocalSession, 0, n.localCount)
	for _, devs := range n.local {
		for _, c := range devs {
			s := c.sess
			out = append(out, LocalSession{User: s.user, Device: s.device, Session: s.id, Epoch: s.epoch,
				Status: s.status.String(), Groups: slices.Clone(s.groups), Remote: c.remote})
		}
	}
	n.mu.Unlock()
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
