package node

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"testing"
	"unicode/utf8"
)

// FuzzDecodeRequest checks the request decoder on arbitrary lines: it never
// panics, an accepted request has a known op and a string or number id,
// and the allocation-free heartbeat fast path agrees with the decoder.
// Seed corpus: testdata/fuzz/FuzzDecodeRequest (node/testdata links to
// testdata/node).
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
			if rerr != nil || req.Op != OpHB || req.ID != nil {
				t.Fatalf("fast path accepted %q, decoder says %+v %v", line, req, rerr)
			}
		}
		if !validID(req.ID) {
			t.Fatalf("invalid id %q kept", req.ID)
		}
		if rerr != nil {
			switch rerr.code {
			case CodeBadJSON, CodeBadRequest, CodeUnknownOp:
			default:
				t.Fatalf("decoder returned %s", rerr.code)
			}
			// The error line must encode, as valid UTF-8 (it echoes the id).
			line := encodeError(req.ID, rerr.code, rerr.msg)
			var ef ErrorFrame
			if err := json.Unmarshal(line, &ef); err != nil || !utf8.Valid(line) {
				t.Fatalf("error frame %q does not decode: %v", line, err)
			}
			return
		}
		if !knownOp(req.Op) {
			t.Fatalf("accepted unknown op %q", req.Op)
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

// FuzzReadLine feeds an arbitrary byte stream through a connection's line
// reader with a small limit: lines never exceed it or hold a newline, and
// an over-long line is reported, not split.
func FuzzReadLine(f *testing.F) {
	f.Add([]byte("{\"op\":\"hb\"}\n{\"op\":\"hb\"}\r\n"))
	f.Add(bytes.Repeat([]byte("x"), 5000))
	f.Add(append(bytes.Repeat([]byte("y"), 3000), '\n', 'z', '\n'))
	f.Fuzz(func(t *testing.T, stream []byte) {
		const limit = minMaxLineBytes
		c := &conn{n: &Node{cfg: Config{MaxLineBytes: limit}}, br: bufio.NewReaderSize(bytes.NewReader(stream), readBufferSize)}
		total := 0
		for {
			line, err := c.readLine()
			if errors.Is(err, errLineTooLong) {
				return
			}
			if err != nil {
				if !errors.Is(err, io.EOF) {
					t.Fatal(err)
				}
				return
			}
			if len(line) > limit || bytes.IndexByte(line, '\n') >= 0 {
				t.Fatalf("line of %d bytes", len(line))
			}
			total += len(line) + 1
			if total > len(stream)+1 {
				t.Fatal("read more than the stream")
			}
		}
	})
}
