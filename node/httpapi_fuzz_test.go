package node

import (
	"encoding/json"
	"net/url"
	"testing"
	"unicode/utf8"

	"github.com/rollcall/rollcall/protocol"
)

// checkAPIRefusal fails unless rerr is a clear refusal: bad_request with a
// message in valid UTF-8.
func checkAPIRefusal(t *testing.T, rerr *requestError) {
	t.Helper()
	if rerr.code != protocol.CodeBadRequest || rerr.msg == "" || !utf8.ValidString(rerr.msg) {
		t.Fatalf("refusal %s %q", rerr.code, rerr.msg)
	}
}

// FuzzPresenceRequest decodes arbitrary bodies of POST /v1/presence: it
// never panics, a refusal is bad_request with a readable message, and
// what it accepts is 1 to MaxUsersPerRequest valid, unique names. Seed
// corpus: testdata/fuzz/FuzzPresenceRequest.
func FuzzPresenceRequest(f *testing.F) {
	for _, s := range []string{`{"users":["alice","bob"]}`, `{"users":["a","a"]}`, `{"users":[]}`, `{"users":"a"}`,
		`{"users":[1]}`, `["a"]`, `{"users":["\u0001"]}`, `{"users":["a"]} x`, `null`, ``, "{\"users\":[\"\xff\"]}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		users, rerr := decodePresenceRequest(body)
		if rerr != nil {
			checkAPIRefusal(t, rerr)
			return
		}
		if len(users) == 0 || len(users) > protocol.MaxUsersPerRequest {
			t.Fatalf("accepted %d users", len(users))
		}
		seen := map[string]bool{}
		for _, u := range users {
			if checkName("user", u) != nil || seen[u] {
				t.Fatalf("accepted user %q (seen %v)", u, seen[u])
			}
			seen[u] = true
		}
	})
}

// FuzzSendRequest decodes arbitrary bodies of POST /v1/send: it never
// panics, a refusal is bad_request with a readable message, and what it
// accepts is a valid recipient and a message body a client can parse (one
// JSON value in valid UTF-8, at most MaxSendBodyBytes). Seed corpus:
// testdata/fuzz/FuzzSendRequest.
func FuzzSendRequest(f *testing.F) {
	for _, s := range []string{`{"to":"bob","body":{"text":"hi"}}`, `{"to":"bob","body":null}`, `{"to":"bob"}`, `{"body":1}`,
		`{"to":7,"body":1}`, `{"to":"bob","body":"\ud800"}`, `{"to":"b\u007f","body":1}`, `[]`, "{\"to\":\"bob\",\"body\":\"\xc3\"}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		to, msg, rerr := decodeSendRequest(body)
		if rerr != nil {
			checkAPIRefusal(t, rerr)
			return
		}
		if checkName("to", to) != nil {
			t.Fatalf("accepted recipient %q", to)
		}
		if len(msg) == 0 || len(msg) > protocol.MaxSendBodyBytes || !utf8.Valid(msg) || !json.Valid(msg) {
			t.Fatalf("accepted message body %q", msg)
		}
		// What a recipient gets parses.
		frame := encodeLine(protocol.MessageFrame{Op: protocol.OpMessage, From: "svc", Body: msg})
		var m protocol.MessageFrame
		if err := json.Unmarshal(frame, &m); err != nil {
			t.Fatalf("the message frame %q: %v", frame, err)
		}
	})
}

// FuzzDisconnectRequest decodes arbitrary users and bodies of POST
// /v1/users/{user}/disconnect: it never panics, a refusal is bad_request
// with a readable message, and what it accepts is a valid user and an
// empty or valid device. Seed corpus: testdata/fuzz/FuzzDisconnectRequest.
func FuzzDisconnectRequest(f *testing.F) {
	for _, s := range [][2]string{{"alice", ``}, {"alice", `{}`}, {"alice", `{"device":"phone"}`}, {"alice", `{"device":""}`},
		{"", `{}`}, {"a\x00", ``}, {"alice", `{"device":7}`}, {"alice", `"phone"`}, {"alice", `{"device":"p"} {}`}} {
		f.Add(s[0], []byte(s[1]))
	}
	f.Fuzz(func(t *testing.T, user string, body []byte) {
		device, rerr := decodeDisconnectRequest(user, body)
		if rerr != nil {
			checkAPIRefusal(t, rerr)
			return
		}
		if checkName("user", user) != nil || (device != "" && checkName("device", device) != nil) {
			t.Fatalf("accepted user %q, device %q", user, device)
		}
	})
}

// FuzzGroupQuery decodes arbitrary groups and query strings of GET
// /v1/groups/{group}: it never panics, a refusal is bad_request with a
// readable message, and what it accepts is a valid group, a limit of 0 to
// MaxGroupPage (0 with count_only), and an empty or valid cursor. Seed
// corpus: testdata/fuzz/FuzzGroupQuery.
func FuzzGroupQuery(f *testing.F) {
	for _, s := range [][2]string{{"eng", ""}, {"eng", "limit=10&cursor=bob"}, {"eng", "count_only=1"}, {"eng", "limit=-1"},
		{"eng", "limit=99999999999999999999"}, {"", ""}, {"eng", "cursor=%00"}, {"eng", "count_only=maybe"}, {"e/g", "limit=0&count_only=0"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, group, query string) {
		q, _ := url.ParseQuery(query) // what it could parse, as Request.URL.Query gives a handler
		gq, rerr := decodeGroupQuery(group, q)
		if rerr != nil {
			checkAPIRefusal(t, rerr)
			return
		}
		if checkName("group", group) != nil || gq.limit < 0 || gq.limit > protocol.MaxGroupPage ||
			(gq.countOnly && gq.limit != 0) || (gq.cursor != "" && checkName("cursor", gq.cursor) != nil) {
			t.Fatalf("accepted group %q, %+v", group, gq)
		}
	})
}
