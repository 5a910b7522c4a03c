package node

import (
	_ "embed"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"unicode/utf8"

	"github.com/rollcall/rollcall/auth"
	"github.com/rollcall/rollcall/protocol"
)

// The backend API: what an app's servers ask of the cluster over HTTP,
// without a session of their own (docs/http-api.md; described for tools
// by openapi.json, served at GET /v1/openapi.json):
//
//	POST /v1/presence                  read     {"users": [...]} -> {"users": [Presence...]}
//	GET  /v1/groups/{group}            read     ?limit=&cursor= -> {"online", "members", "next"};
//	                                            ?count_only=1 -> {"online"}
//	POST /v1/users/{user}/disconnect   backend  {"device"?} -> {"disconnected", "unreached"?}
//	POST /v1/send                      backend  {"to", "body"} -> {"delivered"}
//	GET  /v1/openapi.json              open     the OpenAPI 3 description
//
// Who may call them: read routes the admin token or a client token that
// may read every user (backend, or "*" in read: Grants.MayReadAll), as
// GET /v1/sessions; backend routes the admin token or a backend client
// token. Everything is open on a Dev node. No token, or one that does not
// verify, gets 401; a valid token without the grant, 403 forbidden.
//
// Each request is first taken from its source address's allowance
// (Limits.RequestRate and RequestBurst, what one client connection may
// make): past it, 429 rate_limited with Retry-After. A body is read up to
// protocol.MaxHTTPBodyBytes (past it, 413). Every refusal is JSON,
// {"error": message, "code": code} with a client protocol error code, as
// the other HTTP errors of the gateway.

//go:embed openapi.json
var openAPIDoc []byte

// apiAccess is what a backend API route requires of its caller's token.
type apiAccess int

const (
	apiRead    apiAccess = iota // read every user and group: Grants.MayReadAll
	apiBackend                  // act for the app: Grants.Backend
)

func (a apiAccess) String() string {
	if a == apiBackend {
		return "backend"
	}
	return "read"
}

// apiHandler serves a backend API request; caller is the subject of the
// client token it came with ("" for the admin token, or on a Dev node).
type apiHandler func(w http.ResponseWriter, r *http.Request, caller string)

// handleAPI mounts the backend API on mux.
func (n *Node) handleAPI(mux *routeMux) {
	mux.Handle("POST /v1/presence", n.requireAPI(apiRead, n.handlePresenceBatch))
	mux.Handle("GET /v1/groups/{group}", n.requireAPI(apiRead, n.handleGroupHTTP))
	mux.Handle("POST /v1/users/{user}/disconnect", n.requireAPI(apiBackend, n.handleDisconnectHTTP))
	mux.Handle("POST /v1/send", n.requireAPI(apiBackend, n.handleSendHTTP))
	mux.HandleFunc("GET /v1/openapi.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(openAPIDoc) //nolint:errcheck // the client went away
	})
}

// requireAPI wraps a backend API route: the source's rate, then the
// caller's token.
func (n *Node) requireAPI(access apiAccess, h apiHandler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ok, wait := n.apiLimit.allow(n.requestSource(r), n.mono(), n.limits.Load()); !ok {
			n.stats.rateLimited.Add(1)
			lim := n.limits.Load()
			w.Header().Set("Retry-After", strconv.FormatInt(int64(math.Ceil(wait.Seconds())), 10))
			n.apiError(w, http.StatusTooManyRequests, errorf(protocol.CodeRateLimited,
				"at most %s API requests per second (%d at once) from one address; the next is allowed in %dms",
				strconv.FormatFloat(lim.RequestRate, 'g', -1, 64), lim.RequestBurst, max(wait.Milliseconds(), 1)))
			return
		}
		caller := ""
		if !n.cfg.Dev && !n.isAdmin(r) {
			id, ok := n.clientIdentity(bearerToken(r))
			if !ok {
				n.unauthorized(w, r)
				return
			}
			if !apiAllows(access, id.Grants) {
				n.stats.forbidden.Add(1)
				n.apiError(w, http.StatusForbidden, errorf(protocol.CodeForbidden,
					"the token does not allow the backend API's %s routes (mint one with rollcall token --backend, or use the admin token)", access))
				return
			}
			caller = id.User
		}
		h(w, r, caller)
	})
}

// apiAllows reports whether grants g allow a route that requires access.
func apiAllows(access apiAccess, g *auth.Grants) bool {
	if access == apiBackend {
		return g.Backend()
	}
	return g.MayReadAll()
}

// apiError answers a refused backend API request.
func (n *Node) apiError(w http.ResponseWriter, status int, rerr *requestError) {
	n.writeJSON(w, status, map[string]string{"error": rerr.msg, "code": string(rerr.code)})
}

// readAPIBody reads a request's body, at most protocol.MaxHTTPBodyBytes.
// It answers the request itself, and returns false, when the body is too
// large or cannot be read.
func (n *Node) readAPIBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, protocol.MaxHTTPBodyBytes))
	if mbe, ok := errors.AsType[*http.MaxBytesError](err); ok {
		n.apiError(w, http.StatusRequestEntityTooLarge, errorf(protocol.CodeBadRequest,
			"the request's body is over %d bytes", mbe.Limit))
		return nil, false
	}
	if err != nil {
		n.apiError(w, http.StatusBadRequest, errorf(protocol.CodeBadRequest, "the request's body could not be read: %v", err))
		return nil, false
	}
	return b, true
}

// decodeJSONObject decodes body, one JSON object and nothing after it, into
// v. want shows the expected shape in the error.
func decodeJSONObject(body []byte, want string, v any) *requestError {
	if !utf8.Valid(body) {
		return errorf(protocol.CodeBadRequest, "the body is not valid UTF-8; want %s", want)
	}
	var raw json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		return errorf(protocol.CodeBadRequest, "the body is not JSON (%s); want %s", jsonProblem(err), want)
	}
	if raw[0] != '{' {
		return errorf(protocol.CodeBadRequest, "the body is not a JSON object; want %s", want)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return errorf(protocol.CodeBadRequest, "%s; want %s", jsonProblem(err), want)
	}
	return nil
}

// jsonProblem says what is wrong with a JSON document, naming the field
// of a type error.
func jsonProblem(err error) string {
	if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok && te.Field != "" {
		return te.Field + " is a JSON " + te.Value + ", want " + jsonType(te.Type.String())
	}
	if se, ok := errors.AsType[*json.SyntaxError](err); ok {
		return "at byte " + strconv.FormatInt(se.Offset, 10) + ": " + se.Error()
	}
	return err.Error()
}

// jsonType names a Go type of the API's bodies as JSON does.
func jsonType(goType string) string {
	switch goType {
	case "string":
		return "a string"
	case "[]string":
		return "an array of strings"
	}
	return goType
}

// presenceRequest is the body of POST /v1/presence.
type presenceRequest struct {
	Users []string `json:"users"`
}

// decodePresenceRequest decodes and checks the body of POST /v1/presence:
// 1 to MaxUsersPerRequest user names. It returns them without repeats, in
// the order each first appears.
func decodePresenceRequest(body []byte) ([]string, *requestError) {
	const want = `{"users": ["alice", ...]}`
	var req presenceRequest
	if rerr := decodeJSONObject(body, want, &req); rerr != nil {
		return nil, rerr
	}
	if len(req.Users) == 0 {
		return nil, errorf(protocol.CodeBadRequest, "want users: %s", want)
	}
	if len(req.Users) > protocol.MaxUsersPerRequest {
		return nil, errorf(protocol.CodeBadRequest, "%d users; at most %d per request", len(req.Users), protocol.MaxUsersPerRequest)
	}
	users := firstOccurrences(req.Users)
	for _, u := range users {
		if rerr := checkName("user", u); rerr != nil {
			return nil, rerr
		}
	}
	return users, nil
}

// handlePresenceBatch answers the presence of each user asked, in request
// order (a user named more than once, at its first place only), as get
// (an invisible user offline to a reader that is not a backend).
func (n *Node) handlePresenceBatch(w http.ResponseWriter, r *http.Request, _ string) {
	body, ok := n.readAPIBody(w, r)
	if !ok {
		return
	}
	users, rerr := decodePresenceRequest(body)
	if rerr != nil {
		n.apiError(w, http.StatusBadRequest, rerr)
		return
	}
	out := make([]protocol.Presence, 0, len(users))
	who := n.httpViewer(r)
	lk := lockOf(&n.mu)
	defer lk.unlock()
	v := n.nextVersionLocked()
	now := n.clock.Now().UnixNano()
	for _, u := range users {
		out = append(out, presenceJSON(who.view(n.replica.Presence(u, now)), v))
	}
	lk.unlock()
	n.writeJSON(w, http.StatusOK, map[string]any{"users": out})
}

// groupQuery is what GET /v1/groups/{group} asks for.
type groupQuery struct {
	limit     int
	cursor    string
	countOnly bool
}

// decodeGroupQuery decodes and checks GET /v1/groups/{group}'s group and
// query: limit (0 to MaxGroupPage, default DefaultGroupPage), cursor (the
// previous page's next) and count_only (1 or true: the count alone).
func decodeGroupQuery(group string, q url.Values) (groupQuery, *requestError) {
	gq := groupQuery{limit: protocol.DefaultGroupPage, cursor: q.Get("cursor")}
	if s := q.Get("limit"); s != "" {
		l, err := strconv.Atoi(s)
		if err != nil {
			return groupQuery{}, errorf(protocol.CodeBadRequest, "limit %q is not a number: want 0 to %d", truncate(s, 32), protocol.MaxGroupPage)
		}
		gq.limit = l
	}
	switch c := q.Get("count_only"); c {
	case "", "0", "false":
	case "1", "true":
		gq.countOnly = true
		gq.limit = 0
	default:
		return groupQuery{}, errorf(protocol.CodeBadRequest, "count_only %q: want 1 or 0", truncate(c, 32))
	}
	if rerr := checkGroupPage(group, gq.cursor, gq.limit); rerr != nil {
		return groupQuery{}, rerr
	}
	return gq, nil
}

// groupPageJSON is the answer of GET /v1/groups/{group}.
type groupPageJSON struct {
	Online  int                 `json:"online"`
	Members []protocol.Presence `json:"members"`
	Next    string              `json:"next"`
}

// handleGroupHTTP answers a page of a group's online members, as group
// (groupPage), or with count_only their count alone.
func (n *Node) handleGroupHTTP(w http.ResponseWriter, r *http.Request, _ string) {
	group := r.PathValue("group")
	gq, rerr := decodeGroupQuery(group, r.URL.Query())
	if rerr != nil {
		n.apiError(w, http.StatusBadRequest, rerr)
		return
	}
	// The page's own fields: next, a user name escaped at worst.
	budget := n.cfg.OutboundQueueBytes/2 - (64 + 6*protocol.MaxNameLen)
	online, members, next, rerr := n.groupPage(group, gq.cursor, gq.limit, budget, n.httpViewer(r), nil)
	if rerr != nil {
		n.apiError(w, http.StatusInternalServerError, rerr)
		return
	}
	if gq.countOnly {
		n.writeJSON(w, http.StatusOK, map[string]int{"online": online})
		return
	}
	n.writeJSON(w, http.StatusOK, groupPageJSON{Online: online, Members: members, Next: next})
}

// disconnectRequest is the body of POST /v1/users/{user}/disconnect.
type disconnectRequest struct {
	Device string `json:"device"`
}

// decodeDisconnectRequest decodes and checks the user and body of POST
// /v1/users/{user}/disconnect: an empty body, or an object with an
// optional device. It returns the device ("" for every device).
func decodeDisconnectRequest(user string, body []byte) (string, *requestError) {
	if rerr := checkName("user", user); rerr != nil {
		return "", rerr
	}
	if len(body) == 0 {
		return "", nil
	}
	var req disconnectRequest
	if rerr := decodeJSONObject(body, `{} or {"device": "phone"}`, &req); rerr != nil {
		return "", rerr
	}
	if req.Device != "" {
		if rerr := checkName("device", req.Device); rerr != nil {
			return "", rerr
		}
	}
	return req.Device, nil
}

// disconnectReply is the answer of POST /v1/users/{user}/disconnect.
type disconnectReply struct {
	// Disconnected is how many sessions were ended.
	Disconnected int `json:"disconnected"`
	// Unreached are the gateways owning sessions of the user that could
	// not be asked in time; their sessions may still be active.
	Unreached []string `json:"unreached,omitempty"`
}

// handleDisconnectHTTP ends a user's sessions through their owning
// gateways (disconnectUser).
func (n *Node) handleDisconnectHTTP(w http.ResponseWriter, r *http.Request, _ string) {
	body, ok := n.readAPIBody(w, r)
	if !ok {
		return
	}
	user := r.PathValue("user")
	device, rerr := decodeDisconnectRequest(user, body)
	if rerr != nil {
		n.apiError(w, http.StatusBadRequest, rerr)
		return
	}
	ended, unreached := n.disconnectUser(user, device)
	n.writeJSON(w, http.StatusOK, disconnectReply{Disconnected: ended, Unreached: unreached})
}

// sendRequest is the body of POST /v1/send.
type sendRequest struct {
	To   string          `json:"to"`
	Body json.RawMessage `json:"body"`
}

// decodeSendRequest decodes and checks the body of POST /v1/send: a
// recipient's name and a message body, one JSON value of at most
// MaxSendBodyBytes.
func decodeSendRequest(body []byte) (to string, msg json.RawMessage, rerr *requestError) {
	var req sendRequest
	if rerr := decodeJSONObject(body, `{"to": "bob", "body": <any JSON value>}`, &req); rerr != nil {
		return "", nil, rerr
	}
	if rerr := checkName("to", req.To); rerr != nil {
		return "", nil, rerr
	}
	if len(req.Body) > protocol.MaxSendBodyBytes {
		return "", nil, errorf(protocol.CodeBadRequest, "a body of %d bytes; at most %d", len(req.Body), protocol.MaxSendBodyBytes)
	}
	if rerr := checkBody(req.Body); rerr != nil {
		return "", nil, rerr
	}
	return req.To, req.Body, nil
}

// handleSendHTTP delivers a message to every active session of its
// recipient, as send (sendFrom). Its from is the caller's token subject,
// empty for the admin token; its from_device is empty.
func (n *Node) handleSendHTTP(w http.ResponseWriter, r *http.Request, caller string) {
	body, ok := n.readAPIBody(w, r)
	if !ok {
		return
	}
	to, msg, rerr := decodeSendRequest(body)
	if rerr != nil {
		n.apiError(w, http.StatusBadRequest, rerr)
		return
	}
	delivered := n.sendFrom(Message{To: to, From: caller, Body: msg})
	n.writeJSON(w, http.StatusOK, map[string]int{"delivered": delivered})
}
