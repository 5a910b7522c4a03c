package node

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/rollcall/rollcall/protocol"
)

// decodeRequest parses one request line (newline and trailing "\r" already
// removed, not blank). It checks the envelope only (a JSON object, a known
// op, an id that is a string or a number); each handler checks its fields.
// On failure the returned Request still carries the id when one could be
// read, so the error can echo it.
func decodeRequest(line []byte) (protocol.Request, *requestError) {
	if len(line) == 0 || line[0] != '{' {
		return protocol.Request{}, errorf(protocol.CodeBadJSON, "not a JSON object")
	}
	var req protocol.Request
	if err := json.Unmarshal(line, &req); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			// The line is JSON, but a field has the wrong type: keep the id
			// if it decoded, so the client can match the error.
			if !validID(req.ID) {
				req.ID = nil
			}
			return req, errorf(protocol.CodeBadRequest, "field %q has the wrong type (%s)", typeErr.Field, typeErr.Value)
		}
		return protocol.Request{}, errorf(protocol.CodeBadJSON, "not a JSON object: %v", err)
	}
	if !utf8.Valid(line) {
		// JSON text is UTF-8 (RFC 8259 section 8.1). encoding/json replaces
		// invalid bytes in the strings it decodes, but keeps raw values
		// (id, body) as they came, and those are echoed to clients: a line
		// that is not UTF-8 is refused whole, so no reply or message can
		// carry its bytes.
		if !validID(req.ID) {
			req.ID = nil
		}
		what := "request line"
		if !utf8.Valid(req.Body) {
			what = "body"
		}
		return req, errorf(protocol.CodeBadRequest, "%s is not valid UTF-8", what)
	}
	if !validID(req.ID) {
		req.ID = nil
		return req, errorf(protocol.CodeBadRequest, "id must be a string or a number")
	}
	if req.Op == "" {
		return req, errorf(protocol.CodeBadRequest, "missing op")
	}
	if !protocol.IsRequestOp(req.Op) {
		return req, errorf(protocol.CodeUnknownOp, "unknown op %q", truncate(req.Op, 64))
	}
	return req, nil
}

// requestID returns the id of a request line, for the error that refuses
// it unhandled (rate_limited), or nil when it has none that is valid. It
// decodes the id alone: the rest of the line (a body, a thousand users) is
// scanned, not built, so a refused flood costs little more than its reading.
func requestID(line []byte) json.RawMessage {
	var env struct {
		ID json.RawMessage `json:"id"`
	}
	if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &env) != nil || !validID(env.ID) || !utf8.Valid(env.ID) {
		return nil
	}
	return env.ID
}

// validID reports whether a raw id is absent, a string or a number, in
// valid UTF-8 (it is echoed verbatim).
func validID(id json.RawMessage) bool {
	if len(id) == 0 {
		return true
	}
	switch c := id[0]; {
	case c == '"', c == '-', c >= '0' && c <= '9':
		return utf8.Valid(id)
	}
	return false
}

// trimLine removes the trailing "\n" and "\r" and surrounding JSON
// whitespace from a raw line.
func trimLine(line []byte) []byte {
	return bytes.TrimSpace(line)
}

// isPlainHeartbeat reports whether line is exactly a heartbeat without an
// id, {"op":"hb"}, allowing JSON whitespace between tokens. It is the
// steady-state hot path, so it allocates nothing; anything it does not
// recognise takes the general decoder, which gives the same meaning.
func isPlainHeartbeat(line []byte) bool {
	i := 0
	next := func(want string) bool {
		for i < len(line) && isJSONSpace(line[i]) {
			i++
		}
		if len(line)-i < len(want) || string(line[i:i+len(want)]) != want {
			return false
		}
		i += len(want)
		return true
	}
	if !next("{") || !next(`"op"`) || !next(":") || !next(`"hb"`) || !next("}") {
		return false
	}
	for i < len(line) && isJSONSpace(line[i]) {
		i++
	}
	return i == len(line)
}

func isJSONSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// requestError is a failed request: the code and message to send.
type requestError struct {
	code protocol.ErrorCode
	msg  string
}

func (e *requestError) Error() string { return string(e.code) + ": " + e.msg }

func errorf(code protocol.ErrorCode, format string, args ...any) *requestError {
	return &requestError{code: code, msg: fmt.Sprintf(format, args...)}
}
