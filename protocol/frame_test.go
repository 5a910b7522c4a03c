package protocol

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
)

func TestMarshalIsOneLine(t *testing.T) {
	b, err := Marshal(ErrorFrame{Op: OpError, Code: CodeBadRequest, Message: "a\nb\r", ID: json.RawMessage(`7`)})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"op":"error","code":"bad_request","message":"a\nb\r","id":7}` + "\n"
	if string(b) != want {
		t.Errorf("Marshal = %q, want %q", b, want)
	}
	if got := AppendLine([]byte("x"), []byte(`{"op":"hb"}`)); string(got) != "x{\"op\":\"hb\"}\n" {
		t.Errorf("AppendLine = %q", got)
	}
}

func TestRequestEncoding(t *testing.T) {
	b, err := Marshal(Request{Op: OpHello, ID: json.RawMessage(`1`), User: "alice", Device: "phone", Token: "t", Status: "online"})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"op":"hello","id":1,"user":"alice","device":"phone","token":"t","status":"online"}` + "\n"
	if string(b) != want {
		t.Errorf("hello = %q, want %q", b, want)
	}
}

func TestReaderLines(t *testing.T) {
	in := "{\"op\":\"hb\"}\r\n\n" + strings.Repeat("a", 40) + "\n" + strings.Repeat("b", 41) + "\nrest\npartial"
	r := NewReader(strings.NewReader(in), 16, 40)
	for _, want := range []string{`{"op":"hb"}`, "", strings.Repeat("a", 40)} {
		line, err := r.ReadLine()
		if err != nil || string(line) != want {
			t.Fatalf("ReadLine = %q, %v; want %q", line, err, want)
		}
	}
	if _, err := r.ReadLine(); !errors.Is(err, ErrLineTooLong) {
		t.Fatalf("a 41-byte line under a 40-byte limit: %v, want ErrLineTooLong", err)
	}
	if line, err := r.ReadLine(); err != nil || string(line) != "rest" {
		t.Fatalf("after a long line: %q, %v", line, err)
	}
	if line, err := r.ReadLine(); !errors.Is(err, io.EOF) {
		t.Fatalf("a partial last line: %q, %v; want io.EOF", line, err)
	}
}

func TestReaderStopsEarlyOnLongLine(t *testing.T) {
	// A line that cannot fit is refused before its end arrives.
	pr, pw := io.Pipe()
	go func() {
		pw.Write(bytes.Repeat([]byte("x"), 100)) //nolint:errcheck // the reader stops reading
	}()
	r := NewReader(pr, 16, 40)
	if _, err := r.ReadLine(); !errors.Is(err, ErrLineTooLong) {
		t.Fatalf("ReadLine = %v, want ErrLineTooLong", err)
	}
	pr.Close()
}

func TestCut(t *testing.T) {
	line, rest, found, err := Cut([]byte("ab\r\ncd"), 8)
	if err != nil || !found || string(line) != "ab" || string(rest) != "cd" {
		t.Errorf("Cut = %q, %q, %v, %v", line, rest, found, err)
	}
	line, rest, found, err = Cut([]byte("cd"), 8)
	if err != nil || found || line != nil || string(rest) != "cd" {
		t.Errorf("Cut of a partial line = %q, %q, %v, %v", line, rest, found, err)
	}
	if _, _, _, err := Cut([]byte("0123456789a"), 8); !errors.Is(err, ErrLineTooLong) {
		t.Errorf("Cut of a partial line past the limit: %v", err)
	}
	if _, _, _, err := Cut([]byte("012345678\n"), 8); !errors.Is(err, ErrLineTooLong) {
		t.Errorf("Cut of a line past the limit: %v", err)
	}
}

func TestSplitFunc(t *testing.T) {
	sc := bufio.NewScanner(strings.NewReader("a\r\nb\n\nlast"))
	sc.Split(SplitFunc(8))
	var got []string
	for sc.Scan() {
		got = append(got, sc.Text())
	}
	if sc.Err() != nil || strings.Join(got, "|") != "a|b||last" {
		t.Errorf("lines %q, err %v", got, sc.Err())
	}
	sc = bufio.NewScanner(strings.NewReader("ok\n0123456789\n"))
	sc.Split(SplitFunc(8))
	for sc.Scan() {
	}
	if !errors.Is(sc.Err(), ErrLineTooLong) {
		t.Errorf("a long line: %v", sc.Err())
	}
}

func TestCloses(t *testing.T) {
	for _, c := range []ErrorCode{CodeAuthFailed, CodeLineTooLong, CodeShuttingDown, CodeTokenExpired, CodeUnsupportedProtocol, CodeKicked} {
		if !c.Closes() {
			t.Errorf("%s does not close", c)
		}
	}
	for _, c := range []ErrorCode{CodeBadJSON, CodeBadRequest, CodeRateLimited, CodeForbidden, ErrorCode("new_code")} {
		if c.Closes() {
			t.Errorf("%s closes", c)
		}
	}
}

// FuzzLines reads arbitrary input as protocol lines, from a stream and
// from memory, and decodes each line as a request: both readers must cut
// the same lines, and a decoded request must encode as one line that
// decodes back to itself.
func FuzzLines(f *testing.F) {
	f.Add([]byte("{\"op\":\"hb\"}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		const max = 64
		r := NewReader(bytes.NewReader(data), 16, max)
		buf := data
		for {
			want, rest, found, cutErr := Cut(buf, max)
			got, err := r.ReadLine()
			if cutErr != nil {
				if !errors.Is(err, ErrLineTooLong) && (found || !errors.Is(err, io.EOF)) {
					t.Fatalf("Cut: %v; ReadLine: %q, %v", cutErr, got, err)
				}
				return
			}
			if !found {
				if !errors.Is(err, io.EOF) {
					t.Fatalf("no line left; ReadLine: %q, %v", got, err)
				}
				return
			}
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("Cut: %q; ReadLine: %q, %v", want, got, err)
			}
			if len(want) > max || bytes.ContainsRune(want, '\n') {
				t.Fatalf("line %q: longer than %d or holds a newline", want, max)
			}
			checkRoundTrip(t, want)
			buf = rest
		}
	})
}

func checkRoundTrip(t *testing.T, line []byte) {
	var req Request
	if Unmarshal(line, &req) != nil {
		return
	}
	enc, err := Marshal(req)
	if err != nil {
		// Only a raw id or body that is not valid JSON fails, and decoding
		// checked those.
		t.Fatalf("Marshal of a decoded %q: %v", line, err)
	}
	got, rest, found, err := Cut(enc, len(enc))
	if err != nil || !found || len(rest) != 0 {
		t.Fatalf("encoding %q is not one line", enc)
	}
	var again Request
	if err := Unmarshal(got, &again); err != nil {
		t.Fatalf("re-decoding %q: %v", got, err)
	}
	enc2, _ := Marshal(again)
	if !bytes.Equal(enc, enc2) {
		t.Fatalf("encoding is not stable: %q then %q", enc, enc2)
	}
}

// TestRequestOps: IsRequestOp knows exactly the ops this package declares
// as requests, so a gateway accepts every one of them and nothing else.
func TestRequestOps(t *testing.T) {
	src, err := os.ReadFile("protocol.go")
	if err != nil {
		t.Fatal(err)
	}
	ops := regexp.MustCompile(`(?m)^\s+Op\w+\s+= "(\w+)"\s+// (\w+)`).FindAllSubmatch(src, -1)
	if len(ops) < 15 {
		t.Fatalf("found only %d ops in protocol.go: has its layout changed?", len(ops))
	}
	for _, m := range ops {
		op, request := string(m[1]), string(m[2]) == "request"
		if IsRequestOp(op) != request {
			t.Errorf("IsRequestOp(%q) = %v, want %v", op, !request, request)
		}
	}
	if IsRequestOp("") || IsRequestOp("Hello") {
		t.Error("IsRequestOp accepts an op that is not declared")
	}
}
