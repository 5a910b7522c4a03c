package redisgw

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/rollcall/rollcall/protocol"
)

// FuzzParseRequest: any line gets a request or an error code, never a
// panic, and an id kept for an error is one a reply can echo.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{`{"op":"hello","user":"a","last_epoch":5,"id":1}`, `{"op":"hb"}`,
		`{"op":"sub","users":["a","b"],"id":"x"}`, `{"id":{},"op":1}`, `[1]`, `{"op":"status","status":"away"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		r, code, msg := parseRequest(line)
		if code != "" && msg == "" {
			t.Fatalf("error %s without a message", code)
		}
		if len(r.ID) > 0 && !validID(r.ID) {
			t.Fatalf("kept id %q is not a string or number", r.ID)
		}
		if code == "" && r.Op == "" {
			t.Fatal("accepted a request without op")
		}
		if code == "" && r.LastEpoch != "" {
			if v, err := parseEpoch(r.LastEpoch); err == nil && v >= protocol.MaxEpoch {
				t.Fatalf("last_epoch %d accepted", v)
			}
		}
		if !json.Valid(errorLine(code, msg, r.ID)) {
			t.Fatal("error line is not JSON")
		}
	})
}

// FuzzParseValue: stored session values that are not the gateway's own
// are refused, never a panic; the gateway's own round-trip.
func FuzzParseValue(f *testing.F) {
	f.Add("phone", "17\x1faway\x1fses_1\x1fgw1")
	f.Add("d", "x\x1f\x1f\x1f")
	f.Add("", "")
	f.Fuzz(func(t *testing.T, device, v string) {
		st, err := parseValue(device, v)
		if err != nil {
			return
		}
		if !validStatus(st.Status) {
			t.Fatalf("status %q accepted", st.Status)
		}
		if strings.Contains(st.Session, sep) || strings.Contains(st.Gateway, sep) {
			t.Fatal("a part holds the separator")
		}
		again, err := parseValue(device, formatUint(st.Epoch)+value(st.Status, st.Session, st.Gateway))
		if err != nil || again != st {
			t.Fatalf("round trip: %+v, %v", again, err)
		}
	})
}

func formatUint(v uint64) string { b, _ := json.Marshal(v); return string(b) }
