package node

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/rollcall/rollcall/protocol"
)

// FuzzDecodeRequest checks the request decoder on arbitrary lines: it never
// panics, an accepted request has a known op and a string or number id,
// the allocation-free heartbeat fast path agrees with the decoder, and so
// does the id-only decoder of refused requests (requestID). Seed corpus:
// testdata/fuzz/FuzzDecodeRequest.
func FuzzDecodeRequest(f *testing.F) {
	for _, s := range []string{
		`{"op":"hb"}`, ` { "op" : "hb" } `, `{"op":"hb","id":1}`, `{"op":"hello","user":"u","device":"d","token":"t","status":"away","last_epoch":16,"groups":["a","b"]}`,
		`{"op":"send","to":"bob","body":{"x":[1,2,{"y":null}]}}`, `{"op":"account","override":"dnd","authoritative_device":""}`,
		`{"op":"sub","users":["a"],"group":"g"}`, `{"op":5}`, `{"op":"hb","id":{}}`, `[]`, `null`, `{`, "\xff",
		"{\"op\":\"send\",\"to\":\"b\",\"body\":\"\xff\"}", "{\"op\":\"hb\",\"id\":\"\xc3\"}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		line = trimLine(line)
		if len(line) == 0 {
			return
		}
		req, rerr := decodeRequest(line)
		if isPlainHeartbeat(line) {
			if rerr != nil || req.Op != protocol.OpHB || req.ID != nil {
				t.Fatalf("fast path accepted %q, decoder says %+v %v", line, req, rerr)
			}
		}
		if !validID(req.ID) {
			t.Fatalf("invalid id %q kept", req.ID)
		}
		if rerr != nil {
			switch rerr.code {
			case protocol.CodeBadJSON, protocol.CodeBadRequest, protocol.CodeUnknownOp:
			default:
				t.Fatalf("decoder returned %s", rerr.code)
			}
			// The error line must encode, as valid UTF-8 (it echoes the id).
			line := encodeError(req.ID, rerr.code, rerr.msg)
			var ef protocol.ErrorFrame
			if err := json.Unmarshal(line, &ef); err != nil || !utf8.Valid(line) {
				t.Fatalf("error frame %q does not decode: %v", line, err)
			}
			return
		}
		if !protocol.IsRequestOp(req.Op) {
			t.Fatalf("accepted unknown op %q", req.Op)
		}
		// A rate-limited request's error echoes the id requestID reads
		// without decoding the rest: the id the decoder reads.
		if id := requestID(line); string(id) != string(req.ID) {
			t.Fatalf("requestID %q, decoder's id %q", id, req.ID)
		}
		// Raw values are echoed (id) or passed on (body): an accepted line
		// is valid UTF-8, so they are too.
		if !utf8.Valid(line) {
			t.Fatalf("accepted a line that is not UTF-8: %q", line)
		}
		// Accepted requests re-encode and decode to the same request.
		b, err := json.Marshal(req)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		again, rerr := decodeRequest(b)
		if rerr != nil || again.Op != req.Op || string(again.ID) != string(req.ID) || again.User != req.User {
			t.Fatalf("round trip %q -> %q: %+v %v", line, b, again, rerr)
		}
	})
}

// FuzzMessageFrame checks what a recipient receives for any body and any
// sender names a peer may route here: a body checkBody accepts encodes to
// one line of valid JSON in valid UTF-8 holding the same value, and the
// names come out valid UTF-8 whatever they held. Seed corpus:
// testdata/fuzz/FuzzMessageFrame.
func FuzzMessageFrame(f *testing.F) {
	for _, s := range []string{
		`{"text":"hi"}`, `"caf` + "\u00e9" + `"`, " [1,\n2 ,\t{\"a\":null}] ", `"<b>&amp;</b>"`, `"\u2028"`, `"\ud800"`,
		"\"\xff\"", `{"a":`, `1 2`, ``, "\"\x01\"", `1e999`, `-0.0e+00`, `{"a":1,"a":2}`,
	} {
		f.Add([]byte(s), "alice", "phone")
	}
	f.Add([]byte(`{}`), "al\xffice", "ph\xc3")
	f.Fuzz(func(t *testing.T, body []byte, from, device string) {
		if checkBody(body) != nil {
			if len(body) > 0 && utf8.Valid(body) && json.Valid(body) {
				t.Fatalf("refused a valid body %q", body)
			}
			return
		}
		line := encodeLine(protocol.MessageFrame{Op: protocol.OpMessage, From: from, FromDevice: device, Body: body})
		if !utf8.Valid(line) || !json.Valid(line) {
			t.Fatalf("body %q made an invalid line %q", body, line)
		}
		if i := bytes.IndexByte(line, '\n'); i != len(line)-1 {
			t.Fatalf("body %q made a line with a newline at %d of %d", body, i, len(line))
		}
		var got struct {
			Op   string          `json:"op"`
			Body json.RawMessage `json:"body"`
		}
		if err := json.Unmarshal(line, &got); err != nil || got.Op != protocol.OpMessage {
			t.Fatalf("line %q: %+v, %v", line, got, err)
		}
		var want, have any
		errWant, errHave := json.Unmarshal(body, &want), json.Unmarshal(got.Body, &have)
		if (errWant == nil) != (errHave == nil) || !reflect.DeepEqual(want, have) {
			t.Fatalf("body %q arrived as %q", body, got.Body)
		}
	})
}

// FuzzReadSecretFile reads arbitrary secret files (what an operator points
// --secret-file at): errors, never panics, and what it accepts is the
// file's content without trailing whitespace, at least MinSecretBytes
// long. Seed corpus: testdata/fuzz/FuzzReadSecretFile.
func FuzzReadSecretFile(f *testing.F) {
	for _, s := range []string{
		"0123456789abcdef0123456789abcdef", "0123456789abcdef0123456789abcdef\n", "c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0cw==\r\n",
		"short\n", "", "\n\n\n", strings.Repeat(" ", 40), strings.Repeat("\x00", 32), "\xff\xfe" + strings.Repeat("k", 31) + " \t",
	} {
		f.Add([]byte(s))
	}
	path := filepath.Join(f.TempDir(), "secret")
	f.Fuzz(func(t *testing.T, content []byte) {
		if err := os.WriteFile(path, content, 0o600); err != nil {
			t.Fatal(err)
		}
		b, err := ReadSecretFile(path)
		if err != nil {
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		if len(b) < MinSecretBytes || !bytes.HasPrefix(content, b) || len(bytes.TrimRight(b, " \t\r\n")) != len(b) ||
			len(bytes.TrimRight(content[len(b):], " \t\r\n")) != 0 {
			t.Fatalf("file %q read as %q", content, b)
		}
		if _, err := NewToken(b, "u", time.Minute, time.Unix(0, 0)); err != nil {
			t.Fatalf("an accepted secret does not sign: %v", err)
		}
	})
}

// FuzzVerifyToken feeds arbitrary hello tokens to the verifier: errors,
// never panics, and accepts a token only for its own user and only under
// the secret that signed it (no "none" algorithm, no other key).
func FuzzVerifyToken(f *testing.F) {
	now := time.Date(2026, 9, 24, 17, 45, 0, 0, time.UTC)
	good, err := NewToken(testSecret, "alice", time.Hour, now)
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{
		good, good[:len(good)-2], good + "x", "", ".", "..", "a.b.c",
		"eyJhbGciOiJub25lIn0.eyJzdWIiOiJhbGljZSIsImV4cCI6OTk5OTk5OTk5OX0.",
		"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.x", strings.Repeat("A", 300),
	} {
		f.Add(s, "alice")
	}
	n := tokenNode(f, testSecret, now)
	other := tokenNode(f, []byte("another secret, also 32 bytes long"), now)
	f.Fuzz(func(t *testing.T, token, user string) {
		if len(token) > protocol.MaxTokenLen {
			return // checkHello refuses these before verifying
		}
		if _, err := n.verifyToken(token, user); err != nil {
			return
		}
		if _, err := other.verifyToken(token, user); err == nil {
			t.Fatalf("token %q verifies under two secrets", token)
		}
		if _, err := n.verifyToken(token, user+"x"); err == nil {
			t.Fatalf("token %q verifies for two users", token)
		}
	})
}

// tokenNode is a Node that only verifies tokens: HS256 under secret, at
// now.
func tokenNode(t testing.TB, secret []byte, now time.Time) *Node {
	t.Helper()
	cfg := Config{Secret: secret}
	v, err := newTokenVerifier(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &Node{cfg: cfg, clock: fixedClock(now), tokens: v}
}

// fixedClock is a Clock that always tells the same time.
type fixedClock time.Time

func (c fixedClock) Now() time.Time { return time.Time(c) }
