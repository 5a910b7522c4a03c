package node

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"log"
	"net/http"
	"net/http/pprof"
	"os"
	"strings"

	"go.uber.org/zap"

	"github.com/rollcall/rollcall/protocol"
)

// Who may use which HTTP route:
//
//	open       GET /healthz, /readyz, /ui/, /v1/openapi.json,
//	           Config.HTTPHandlers (the agent's /metrics)
//	read       GET /v1/presence/{user}, /v1/sessions, /v1/stats,
//	           /v1/ui/summary, /v1/ui/events, Config.ReadHTTPHandlers
//	           (the agent's /v1/members): httpReadAllowed
//	read each  GET /v1/events: the users and group it follows, as a sub
//	           (events.go, eventsAllowed)
//	backend    the backend API (httpapi.go, requireAPI): read routes as
//	           read; disconnect and send the admin token or a backend
//	           client token; a valid token without the grant gets 403
//	admin      /debug/pprof/*, Config.AdminHTTPHandlers: the admin token
//	           (Config.AdminToken); 403 when none is configured, open
//	           under Dev when none is configured
//
// A request that is not allowed gets 401 with a JSON error (code
// auth_failed) and a WWW-Authenticate: Bearer challenge (RFC 6750). Tokens travel as
// "Authorization: Bearer <token>"; the admin token is compared in constant
// time.

// MinAdminTokenBytes is the shortest admin token accepted.
const MinAdminTokenBytes = 32

// ReadAdminTokenFile reads an admin token from a file: its text without
// trailing whitespace (spaces, tabs, CR and LF, so `echo`-made files work),
// at least MinAdminTokenBytes long.
func ReadAdminTokenFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read admin token file: %w", err)
	}
	b = bytes.TrimRight(b, " \t\r\n")
	if len(b) < MinAdminTokenBytes {
		return nil, fmt.Errorf("admin token file %s holds %d bytes; want at least %d (e.g. head -c 32 /dev/urandom | base64 > %s)",
			path, len(b), MinAdminTokenBytes, path)
	}
	return b, nil
}

// httpReadAllowed reports whether r may read through a read-only route:
// the presence of user (GET /v1/presence/{user}), or with user empty the
// node-wide state (sessions, stats, members, the status page's data).
// Allowed are the admin token and a client token valid on this node whose
// grants allow the read (docs/protocol.md, Authorization): for a user's
// presence, the user itself or a read grant of that user; for the
// node-wide state, a backend token. A Dev node, which lets anyone connect as anyone,
// lets anyone read.
func (n *Node) httpReadAllowed(r *http.Request, user string) bool {
	if n.cfg.Dev || n.isAdmin(r) {
		return true
	}
	token := bearerToken(r)
	if token == "" {
		return false
	}
	if user == "" {
		return n.clientMayReadAll(token)
	}
	return n.clientMayRead(token, user)
}

// isAdmin reports whether r carries the admin token. The comparison is of
// SHA-256 digests, in constant time: neither the token's bytes nor its
// length show in the timing.
func (n *Node) isAdmin(r *http.Request) bool {
	if len(n.cfg.AdminToken) == 0 {
		return false
	}
	token := bearerToken(r)
	if token == "" {
		return false
	}
	got, want := sha256.Sum256([]byte(token)), sha256.Sum256(n.cfg.AdminToken)
	return subtle.ConstantTimeCompare(got[:], want[:]) == 1
}

// bearerToken returns the token of r's "Authorization: Bearer" header, or
// "" when there is none. The scheme is case-insensitive (RFC 7235).
func bearerToken(r *http.Request) string {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}

// requireRead wraps a read-only route; user returns the user a request
// reads, or "" for node-wide state.
func (n *Node) requireRead(h http.Handler, user func(*http.Request) string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !n.httpReadAllowed(r, user(r)) {
			n.unauthorized(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// requireAdmin wraps an admin route.
func (n *Node) requireAdmin(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case n.isAdmin(r):
		case len(n.cfg.AdminToken) == 0 && n.cfg.Dev:
		case len(n.cfg.AdminToken) == 0:
			n.writeJSON(w, http.StatusForbidden, map[string]string{"error": "admin API disabled: start the agent with --admin-token-file", "code": string(protocol.CodeForbidden)})
			return
		default:
			n.unauthorized(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// unauthorized answers 401 with a Bearer challenge.
func (n *Node) unauthorized(w http.ResponseWriter, r *http.Request) {
	challenge, msg := `Bearer realm="rollcall"`, "missing credentials: send Authorization: Bearer <token>"
	if r.Header.Get("Authorization") != "" {
		challenge += `, error="invalid_token"`
		msg = "the bearer token is not valid for this request"
	}
	n.log.Debug("http request refused", zap.String("method", r.Method), zap.String("path", r.URL.Path), zap.String("remote", r.RemoteAddr))
	w.Header().Set("WWW-Authenticate", challenge)
	n.writeJSON(w, http.StatusUnauthorized, map[string]string{"error": msg, "code": string(protocol.CodeAuthFailed)})
}

// pathUser is the user a GET /v1/presence/{user} request reads.
func pathUser(r *http.Request) string { return r.PathValue("user") }

// nodeWide marks a route that reads node-wide state.
func nodeWide(*http.Request) string { return "" }

// handlePprof mounts net/http/pprof's handlers on mux, behind the admin
// token (profiles and the command line reveal secrets). They are mounted
// here only: the package also registers them on http.DefaultServeMux,
// which the node never serves.
func (n *Node) handlePprof(mux *routeMux) {
	mux.Handle("/debug/pprof/", n.requireAdmin(http.HandlerFunc(pprof.Index)))
	mux.Handle("/debug/pprof/cmdline", n.requireAdmin(http.HandlerFunc(pprof.Cmdline)))
	mux.Handle("/debug/pprof/profile", n.requireAdmin(http.HandlerFunc(pprof.Profile)))
	mux.Handle("/debug/pprof/symbol", n.requireAdmin(http.HandlerFunc(pprof.Symbol)))
	mux.Handle("/debug/pprof/trace", n.requireAdmin(http.HandlerFunc(pprof.Trace)))
}

// httpErrorLog sends net/http's own errors (mostly failed TLS handshakes
// and malformed requests from whoever reaches the port) to the node's log at
// debug level.
func (n *Node) httpErrorLog() *log.Logger {
	l, err := zap.NewStdLogAt(n.log.Named("http"), zap.DebugLevel)
	if err != nil {
		return zap.NewStdLog(n.log.Named("http"))
	}
	return l
}
