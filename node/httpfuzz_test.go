package node

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/rollcall/rollcall/protocol"
)

// FuzzBearerToken checks the parsing of an Authorization header (the HTTP
// API's bearerToken and a WebSocket upgrade's upgradeToken) on arbitrary
// values: it never panics, a token is found only under the Bearer scheme
// (any case), and the token has no surrounding whitespace. Seed corpus:
// testdata/fuzz/FuzzBearerToken.
func FuzzBearerToken(f *testing.F) {
	for _, s := range []string{"Bearer abc", "bearer   abc  ", "Basic dXNlcjpwYXNz", "Bearer", "Bearer ", " Bearer x", "BEARER a b c", "", "\x00 \xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, header string) {
		r := &http.Request{Header: http.Header{"Authorization": {header}}, URL: &url.URL{}}
		tok := bearerToken(r)
		if up := upgradeToken(r); header != "" && up != tok {
			t.Fatalf("upgradeToken %q, bearerToken %q", up, tok)
		}
		if tok == "" {
			return
		}
		scheme, _, _ := strings.Cut(header, " ")
		if !strings.EqualFold(scheme, "Bearer") {
			t.Fatalf("token %q from scheme %q", tok, scheme)
		}
		if strings.TrimSpace(tok) != tok {
			t.Fatalf("token %q keeps whitespace", tok)
		}
	})
}

// FuzzEventStreamQuery checks the parameters of GET /v1/events on
// arbitrary query strings and Last-Event-ID values: it never panics,
// accepted subjects are valid names within the stream's limit, unique,
// and a refusal says why in valid UTF-8; a resume token is accepted only
// with this node's incarnation. Seed corpus:
// testdata/fuzz/FuzzEventStreamQuery.
func FuzzEventStreamQuery(f *testing.F) {
	for _, s := range [][2]string{
		{"users=alice,bob", "5-7"}, {"group=eng&users=a", ""}, {"users=a,,b", "x-7"}, {"group=", "-7"},
		{"users=%01", "18446744073709551615-7"}, {"users=" + strings.Repeat("u,", 20), "0-7"}, {"group=%ff", "1-7-"},
	} {
		f.Add(s[0], s[1])
	}
	n := &Node{}
	n.origin.Incarnation = 7
	f.Fuzz(func(t *testing.T, query, lastID string) {
		r := &http.Request{URL: &url.URL{RawQuery: query}}
		users, group, rerr := eventsSubjects(r)
		if rerr != nil {
			if rerr.code != protocol.CodeBadRequest || !utf8.ValidString(rerr.msg) {
				t.Fatalf("refusal %s %q", rerr.code, rerr.msg)
			}
		} else {
			if len(users) == 0 && group == "" {
				t.Fatal("accepted no subjects")
			}
			k := len(users)
			if group != "" {
				k++
			}
			if k > protocol.MaxSubscriptions {
				t.Fatalf("accepted %d subjects", k)
			}
			seen := map[string]bool{}
			for _, u := range users {
				if checkName("user", u) != nil || seen[u] {
					t.Fatalf("accepted user %q (seen %v)", u, seen[u])
				}
				seen[u] = true
			}
			if group != "" && checkName("group", group) != nil {
				t.Fatalf("accepted group %q", group)
			}
		}
		if v, ok := n.parseEventToken(lastID); ok {
			if v == 0 || !strings.HasSuffix(lastID, "-7") {
				t.Fatalf("accepted resume token %q as version %d", lastID, v)
			}
		}
	})
}
