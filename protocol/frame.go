package protocol

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
)

// The framing: every message is one line, its JSON encoding followed by
// "\n" (encoding/json never writes a raw newline, so the encoding is one
// line). A reader drops the newline and a trailing "\r"; a line longer than
// the reader's limit, newline and "\r" excluded, is an error
// (ErrLineTooLong). A gateway answers one with CodeLineTooLong and closes.

// ErrLineTooLong is a line longer than the reader's limit.
var ErrLineTooLong = errors.New("protocol: line too long")

// Marshal encodes v as one line: its JSON and "\n".
func Marshal(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// AppendLine appends line and "\n" to dst: the framing of a message
// already encoded without its newline.
func AppendLine(dst, line []byte) []byte {
	return append(append(dst, line...), '\n')
}

// Unmarshal decodes one line (with or without its newline) into v.
func Unmarshal(line []byte, v any) error {
	return json.Unmarshal(line, v)
}

// trimEOL drops a line's newline, if any, then a trailing "\r".
func trimEOL(line []byte) []byte {
	if n := len(line); n > 0 && line[n-1] == '\n' {
		line = line[:n-1]
	}
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line
}

// tooLongPartial reports whether n bytes without a newline can no longer
// end a line of at most max bytes (max, "\r" and the newline's room).
func tooLongPartial(n, max int) bool { return n > max+2 }

// Cut cuts the first line off buf, for a caller that holds its input in
// memory: line is that line without its newline and a trailing "\r", rest
// what follows the newline. When buf holds no newline, found is false and
// rest is buf (a partial line to complete with more input), unless it is
// already too long for any line of at most max bytes (ErrLineTooLong). A
// complete line longer than max is ErrLineTooLong too.
func Cut(buf []byte, max int) (line, rest []byte, found bool, err error) {
	i := bytes.IndexByte(buf, '\n')
	if i < 0 {
		if tooLongPartial(len(buf), max) {
			return nil, nil, false, ErrLineTooLong
		}
		return nil, buf, false, nil
	}
	line = trimEOL(buf[:i])
	if len(line) > max {
		return nil, nil, true, ErrLineTooLong
	}
	return line, buf[i+1:], true, nil
}

// Reader reads lines of at most a limit from a stream. It is not safe for
// concurrent use.
type Reader struct {
	br   *bufio.Reader
	max  int
	keep int    // the largest assembly buffer kept between lines
	long []byte // a line longer than the buffer, assembled
}

// NewReader returns a Reader of lines of at most max bytes from r, read
// through a buffer of size bytes. Lines longer than the buffer are
// assembled in memory; an assembly buffer over four times size is dropped
// after its line, so an idle reader stays small.
func NewReader(r io.Reader, size, max int) *Reader {
	return &Reader{br: bufio.NewReaderSize(r, size), max: max, keep: 4 * size}
}

// ReadLine returns the next line, without its newline and a trailing "\r".
// The slice is valid until the next call. A line longer than the limit is
// ErrLineTooLong; the reader then stands inside that line (its rest is
// read as the next line), so a caller closes the stream, or discards lines
// until its end. At the end of the stream, a partial last line is dropped
// and the error is the stream's (io.EOF).
func (r *Reader) ReadLine() ([]byte, error) {
	r.long = r.long[:0]
	for {
		frag, err := r.br.ReadSlice('\n')
		switch {
		case err == nil:
			line := frag
			if len(r.long) > 0 {
				r.long = append(r.long, frag...)
				line = r.long
			}
			line = trimEOL(line)
			if len(line) > r.max {
				r.release()
				return nil, ErrLineTooLong
			}
			return line, nil
		case errors.Is(err, bufio.ErrBufferFull):
			if tooLongPartial(len(r.long)+len(frag), r.max) {
				// No need to read the rest: the line is refused whole.
				r.release()
				return nil, ErrLineTooLong
			}
			r.long = append(r.long, frag...)
		default:
			r.release()
			return nil, err
		}
	}
}

// release drops a large assembly buffer.
func (r *Reader) release() {
	if cap(r.long) > r.keep {
		r.long = nil
	}
	r.long = r.long[:0]
}

// SplitFunc returns a bufio.SplitFunc of lines of at most max bytes, for
// a bufio.Scanner (whose buffer must hold max+2 bytes: Scanner.Buffer):
// tokens are lines without their newline and a trailing "\r"; a longer line
// stops the scan with ErrLineTooLong. A final line without a newline is a
// token too.
func SplitFunc(max int) bufio.SplitFunc {
	return func(data []byte, atEOF bool) (int, []byte, error) {
		line, rest, found, err := Cut(data, max)
		switch {
		case err != nil:
			return 0, nil, err
		case found:
			return len(data) - len(rest), line, nil
		case atEOF && len(data) > 0:
			if line = trimEOL(data); len(line) > max {
				return 0, nil, ErrLineTooLong
			}
			return len(data), line, nil
		}
		return 0, nil, nil
	}
}
