package centrifugebase

import (
	"bytes"
	"sync/atomic"
	"testing"
)

// frame is a server's (unmasked) WebSocket frame.
func frame(fin bool, op byte, payload []byte) []byte {
	h := op
	if fin {
		h |= 0x80
	}
	switch n := len(payload); {
	case n < 126:
		return append([]byte{h, byte(n)}, payload...)
	case n < 1<<16:
		return append([]byte{h, 126, byte(n >> 8), byte(n)}, payload...)
	default:
		b := []byte{h, 127, 0, 0, 0, 0, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
		return append(b, payload...)
	}
}

func TestPingCounter(t *testing.T) {
	big := append(bytes.Repeat([]byte(`{"push":{"channel":"status:1"}}`+"\n"), 3000), []byte("{}")...) // > 64 KiB
	var stream []byte
	stream = append(stream, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n"...)
	stream = append(stream, frame(true, 1, []byte(`{"id":1,"connect":{}}`))...)   // a reply: not a ping
	stream = append(stream, frame(true, 1, []byte("{}"))...)                      // 1
	stream = append(stream, frame(true, 1, []byte(`{"push":{}}`+"\n{}"))...)      // 2: batched with a push
	stream = append(stream, frame(true, 1, []byte("{}\n{}\n"+`{"id":2}`))...)     // 3, 4
	stream = append(stream, frame(false, 1, []byte("{"))...)                      // fragmented ...
	stream = append(stream, frame(true, 9, []byte("{}"))...)                      // (a WebSocket ping between fragments)
	stream = append(stream, frame(true, 0, []byte("}"))...)                       // ... 5
	stream = append(stream, frame(true, 1, []byte("{}}"))...)                     // not a ping
	stream = append(stream, frame(true, 1|0x40, []byte("{}"))...)                 // compressed: not looked into
	stream = append(stream, frame(true, 1, bytes.Repeat([]byte("{}\n"), 100))...) // 105, 126-byte length
	stream = append(stream, frame(true, 1, big)...)                               // 106, 64-bit length
	stream = append(stream, frame(true, 8, nil)...)                               // close
	for _, chunk := range []int{1, 3, 7, len(stream)} {
		var n atomic.Int64
		p := newPingCounter(&n)
		for b := stream; len(b) > 0; {
			k := min(chunk, len(b))
			p.feed(b[:k])
			b = b[k:]
		}
		if n.Load() != 106 {
			t.Errorf("read %d bytes at a time: %d pings, want 106", chunk, n.Load())
		}
	}
}
