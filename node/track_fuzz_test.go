package node

import (
	"slices"
	"testing"

	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/protocol"
)

// FuzzTrackRequest checks the track and untrack decoder (decodeRequest,
// then parseTrack) on arbitrary lines: it never panics; it accepts 1 to
// MaxTrackPerRequest sessions, in the request's order, with valid and
// distinct (user, device) keys, a track's groups sorted, unique and within
// MaxGroups, and its meta compact and within MaxMetaBytes; and every
// refusal is bad_request. Seed corpus: testdata/fuzz/FuzzTrackRequest.
func FuzzTrackRequest(f *testing.F) {
	for _, s := range []string{
		`{"op":"track","sessions":[{"user":"u","device":"d"}]}`,
		`{"op":"track","id":1,"sessions":[{"user":"u","device":"d","status":"away","groups":["b","a","a"],"meta":{"x":[1, 2]}},{"user":"v","device":"d"}]}`,
		`{"op":"untrack","sessions":[{"user":"u","device":"d","status":"nonsense"}]}`,
		`{"op":"track","sessions":[{"user":"u","device":"d"},{"user":"u","device":"d"}]}`,
		`{"op":"track","sessions":[]}`, `{"op":"track","sessions":{}}`, `{"op":"track","sessions":[null]}`,
		`{"op":"track","sessions":[{"user":"u","device":"d","meta":[]}]}`,
		"{\"op\":\"track\",\"sessions\":[{\"user\":\"u\\u0001\",\"device\":\"d\"}]}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		line = trimLine(line)
		if len(line) == 0 {
			return
		}
		req, rerr := decodeRequest(line)
		if rerr != nil || (req.Op != protocol.OpTrack && req.Op != protocol.OpUntrack) {
			return
		}
		untrack := req.Op == protocol.OpUntrack
		entries, rerr := parseTrack(&req, untrack)
		if rerr != nil {
			if rerr.code != protocol.CodeBadRequest || rerr.msg == "" {
				t.Fatalf("refused with %s %q", rerr.code, rerr.msg)
			}
			return
		}
		if len(entries) == 0 || len(entries) > protocol.MaxTrackPerRequest || len(entries) != len(req.Sessions) {
			t.Fatalf("%d entries of %d sessions", len(entries), len(req.Sessions))
		}
		seen := map[crdt.Key]bool{}
		for i, e := range entries {
			if e.key.User != req.Sessions[i].User || e.key.Device != req.Sessions[i].Device {
				t.Fatalf("entry %d is %s, the request's %+v", i, e.key, req.Sessions[i])
			}
			if checkName("user", e.key.User) != nil || checkName("device", e.key.Device) != nil || seen[e.key] {
				t.Fatalf("entry %d: accepted key %q", i, e.key)
			}
			seen[e.key] = true
			if untrack {
				continue
			}
			if len(e.groups) > protocol.MaxGroups || !slices.IsSorted(e.groups) || len(slices.Compact(slices.Clone(e.groups))) != len(e.groups) {
				t.Fatalf("entry %d: groups %q", i, e.groups)
			}
			if len(e.meta) > protocol.MaxMetaBytes {
				t.Fatalf("entry %d: meta of %d bytes", i, len(e.meta))
			}
			if e.meta != "" {
				if m, rerr := checkMeta([]byte(e.meta)); rerr != nil || m != e.meta {
					t.Fatalf("entry %d: meta %q not compact (%q, %v)", i, e.meta, m, rerr)
				}
			}
		}
	})
}
