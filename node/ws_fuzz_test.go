package node

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// FuzzWSAdapter drives the WebSocket adapter (ws.go: wsConn, which turns a
// WebSocket into the stream of lines the connection code reads) with frames
// from the input, over a real upgrade. The first byte picks the mode:
//
//   - messages (even): the rest is a list of messages, each text or binary,
//     of any size, cut into any number of fragments with pings between them,
//     then a close frame. The stream read (in reads of an input-chosen size)
//     is each text message followed by a newline unless it ends in one;
//     a stream without binary messages ends in io.EOF at the close. After
//     a binary message, which closes the WebSocket (1003), what is read is
//     the stream before it and then at most the messages after it.
//     The adapter's Write of input bytes arrives as one text message per
//     line, newlines removed.
//   - raw (odd): the rest is sent as is after the upgrade (bad opcodes,
//     unmasked or reserved-bit frames, fragmented control frames, lengths
//     up to 2^63), then the client closes. The adapter must not panic and
//     the reader must end with an error, never hang.
//
// Seed corpus: testdata/fuzz/FuzzWSAdapter.
func FuzzWSAdapter(f *testing.F) {
	f.Add(wsSeedMessages(false))
	f.Add(wsSeedMessages(true))
	f.Add(append([]byte{1}, wsFrame(true, 1, []byte("hello"), true)...))
	f.Add(append([]byte{1}, 0x81, 0x7f, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)) // 2^63 bytes, unmasked
	f.Add(append([]byte{1}, wsFrame(false, 9, bytes.Repeat([]byte("p"), 200), true)...)) // a fragmented ping
	f.Add(append([]byte{1}, 0xf3, 0x80, 0, 0, 0, 0))                                     // reserved bits and opcode
	f.Add(append([]byte{1}, wsFrame(true, 0, []byte("cont"), true)...))                  // a continuation out of nowhere
	f.Add(append([]byte{1}, wsFrame(true, 8, []byte{3}, true)...))                       // a one-byte close payload

	results := make(chan wsResult, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		results <- serveWSFuzz(w, r)
	}))
	f.Cleanup(srv.Close)
	addr := srv.Listener.Addr().String()

	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 2 {
			return
		}
		raw := data[0]%2 == 1
		var frames []byte
		var want wsExpect
		var toWrite []byte
		if raw {
			frames = data[1:]
		} else {
			frames, want, toWrite = wsMessages(data[1:])
		}
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		nc.SetDeadline(time.Now().Add(30 * time.Second)) //nolint:errcheck // a bound on a stuck test, not a timing assertion
		readSize := 1 + int(data[0]>>1)%97
		req := fmt.Sprintf("GET /?read=%d&write=%x HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
			"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", readSize, toWrite)
		if _, err := nc.Write([]byte(req)); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(nc)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("upgrade: %v %v", resp, err)
		}
		if !raw {
			// What the adapter wrote comes first: one text message a line.
			for i, line := range want.written {
				op, payload, err := readServerFrame(br)
				if err != nil || op != 1 || !bytes.Equal(payload, line) {
					t.Fatalf("written message %d: opcode %d %q, %v; want text %q", i, op, payload, err, line)
				}
			}
		}
		// Whatever else the server sends (pongs, close frames) is drained.
		go io.Copy(io.Discard, br) //nolint:errcheck // drained until the test closes nc
		if _, err := nc.Write(frames); err != nil && !raw && !want.binary {
			t.Fatalf("writing the frames: %v", err)
		}
		if raw {
			nc.(*net.TCPConn).CloseWrite() //nolint:errcheck // the adapter sees the end either way
		}
		var res wsResult
		select {
		case res = <-results:
		case <-time.After(30 * time.Second):
			t.Fatal("the adapter's reader did not end")
		}
		if res.err == nil {
			t.Fatal("the adapter's reader ended without an error")
		}
		if raw {
			return
		}
		if !want.binary {
			if !errors.Is(res.err, io.EOF) {
				t.Fatalf("after the close frame the reader ended with %v, want io.EOF", res.err)
			}
			if !bytes.Equal(res.read, want.before) {
				t.Fatalf("read differs from the messages: %s", firstDiff(res.read, want.before))
			}
			return
		}
		rest, ok := bytes.CutPrefix(res.read, want.before)
		if !ok {
			t.Fatalf("read differs from the messages before the binary one: %s", firstDiff(res.read, want.before))
		}
		if !bytes.HasPrefix(want.after, rest) {
			t.Fatalf("read after the binary message is not the messages after it: %s", firstDiff(rest, want.after))
		}
	})
}

// firstDiff describes where got first differs from want.
func firstDiff(got, want []byte) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	return fmt.Sprintf("%d bytes, want %d; from byte %d got %q, want %q", len(got), len(want), i,
		got[i:min(len(got), i+40)], want[i:min(len(want), i+40)])
}

type wsResult struct {
	read []byte
	err  error
}

// serveWSFuzz upgrades r, writes the bytes of the query parameter write
// (hex) through the adapter, then reads the adapter until it fails, in
// reads of the size the query parameter read gives.
func serveWSFuzz(w http.ResponseWriter, r *http.Request) wsResult {
	readSize, _ := strconv.Atoi(r.URL.Query().Get("read"))
	toWrite, err := hex.DecodeString(r.URL.Query().Get("write"))
	if err != nil {
		return wsResult{err: fmt.Errorf("write=: %w", err)}
	}
	hw := &hijackRecorder{ResponseWriter: w}
	ws, err := websocket.Accept(hw, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		return wsResult{err: fmt.Errorf("accept: %w", err)}
	}
	ws.SetReadLimit(-1)
	wc := newWSConn(ws, hw.conn.LocalAddr(), hw.conn.RemoteAddr(), hw.conn.Close)
	defer wc.closeNow()
	if k, err := wc.Write(toWrite); err != nil || k != len(toWrite) {
		return wsResult{err: fmt.Errorf("write: %d of %d bytes: %w", k, len(toWrite), err)}
	}
	go wc.pump()
	var res wsResult
	buf := make([]byte, max(readSize, 1))
	for len(res.read) < 4<<20 {
		k, err := wc.Read(buf)
		res.read = append(res.read, buf[:k]...)
		if err != nil {
			res.err = err
			return res
		}
	}
	res.err = errors.New("too much read")
	return res
}

// wsExpect is what the server side should see of a list of messages.
type wsExpect struct {
	before  []byte   // the stream of the messages before the first binary one
	after   []byte   // the stream of the text messages after it
	binary  bool     // a binary message was sent
	written [][]byte // the messages the adapter's Write sends
}

// wsMessages reads a list of messages from data and returns their frames
// (masked, as a client sends them, ending with a close frame), the stream
// the adapter should make of them, and bytes for the adapter to write.
func wsMessages(data []byte) (frames []byte, want wsExpect, toWrite []byte) {
	in := &fuzzBytes{b: data}
	toWrite = in.take(int(in.byte()) % 64)
	for _, line := range bytes.SplitAfter(toWrite, []byte("\n")) {
		if len(line) > 0 {
			want.written = append(want.written, bytes.TrimSuffix(line, []byte("\n")))
		}
	}
	for in.more() {
		h := in.byte()
		binaryMsg := h%16 == 15
		size := int(in.byte())
		if h&0x40 != 0 {
			size *= 37 // past the adapter's chunk size
		}
		payload := in.fill(size)
		parts := 1 + int(h>>4)%4
		opcode := byte(1)
		if binaryMsg {
			opcode = 2
		}
		for i := range parts {
			lo, hi := len(payload)*i/parts, len(payload)*(i+1)/parts
			op := opcode
			if i > 0 {
				op = 0
			}
			frames = append(frames, wsFrame(i == parts-1, op, payload[lo:hi], true)...)
			if h&0x20 != 0 && i < parts-1 {
				frames = append(frames, wsFrame(true, 9, []byte("ping"), true)...) // a control frame between fragments
			}
		}
		line := payload
		if len(payload) == 0 || payload[len(payload)-1] != '\n' {
			line = append(bytes.Clone(payload), '\n')
		}
		switch {
		case binaryMsg:
			want.binary = true
		case want.binary:
			want.after = append(want.after, line...)
		default:
			want.before = append(want.before, line...)
		}
	}
	frames = append(frames, wsFrame(true, 8, []byte{0x03, 0xe8}, true)...) // close 1000
	return frames, want, toWrite
}

// fuzzBytes reads fuzz input; past its end it reads zeros.
type fuzzBytes struct{ b []byte }

func (in *fuzzBytes) more() bool { return len(in.b) > 0 }

func (in *fuzzBytes) byte() byte {
	if len(in.b) == 0 {
		return 0
	}
	c := in.b[0]
	in.b = in.b[1:]
	return c
}

func (in *fuzzBytes) take(n int) []byte {
	n = min(n, len(in.b))
	out := in.b[:n]
	in.b = in.b[n:]
	return out
}

// fill returns n bytes: up to 64 of the input's next ones, repeated.
func (in *fuzzBytes) fill(n int) []byte {
	src := in.take(min(n, 64))
	if len(src) == 0 {
		src = []byte("x")
	}
	out := make([]byte, n)
	for i := range out {
		out[i] = src[i%len(src)]
	}
	return out
}

// wsFrame encodes one WebSocket frame; masked as a client's.
func wsFrame(fin bool, opcode byte, payload []byte, masked bool) []byte {
	b0 := opcode & 0x0f
	if fin {
		b0 |= 0x80
	}
	out := []byte{b0}
	var m byte
	if masked {
		m = 0x80
	}
	switch n := len(payload); {
	case n < 126:
		out = append(out, m|byte(n))
	case n < 1<<16:
		out = append(out, m|126)
		out = binary.BigEndian.AppendUint16(out, uint16(n))
	default:
		out = append(out, m|127)
		out = binary.BigEndian.AppendUint64(out, uint64(n))
	}
	if !masked {
		return append(out, payload...)
	}
	key := [4]byte{0x12, 0x34, 0x56, 0x78}
	out = append(out, key[:]...)
	for i, c := range payload {
		out = append(out, c^key[i%4])
	}
	return out
}

// readServerFrame reads one unfragmented, unmasked frame from the server.
func readServerFrame(r io.Reader) (opcode byte, payload []byte, err error) {
	var h [2]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	if h[0]&0x80 == 0 || h[1]&0x80 != 0 {
		return 0, nil, fmt.Errorf("frame header %x: fragmented or masked", h)
	}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var b [2]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return 0, nil, err
		}
		n = uint64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return 0, nil, err
		}
		n = binary.BigEndian.Uint64(b[:])
	}
	if n > 1<<20 {
		return 0, nil, fmt.Errorf("frame of %d bytes", n)
	}
	payload = make([]byte, n)
	_, err = io.ReadFull(r, payload)
	return h[0] & 0x0f, payload, err
}

// wsSeedMessages is a messages-mode input: a write of two lines, then text
// messages (one empty, one ending in a newline, one fragmented with a
// ping, one longer than the adapter's chunk) and, when binary is set, a
// binary message and a text message after it.
func wsSeedMessages(binaryMsg bool) []byte {
	b := []byte{0, 6}
	b = append(b, "l1\nl2\n"...)
	b = append(b, 0x00, 0)                               // an empty text message
	b = append(b, 0x00, 3, 'h', 'b', '\n')               // one ending in a newline
	b = append(b, 0x30|0x20, 5, '{', '"', 'o', 'p', '"') // four fragments, pings between
	if binaryMsg {
		b = append(b, 0x0f, 4, 1, 2, 3, 4)         // binary
		b = append(b, 0x00, 4, 'a', 'f', 't', 'r') // text after it
	}
	return append(b, 0x40, 100, 'x', 'y', 'z') // 3700 bytes, the input's last
}
