package crdt

import (
	"bytes"
	"errors"
	"fmt"
	"math"

	"github.com/vmihailenco/msgpack/v5"
)

// Wire encoding of deltas, digests and syncs: msgpack arrays with positional
// fields (no field names on the wire). Decoders check every length against a
// limit before allocating and validate what they decode, so garbage yields an
// error, never a panic or a large allocation.
//
//	Origin     [node, incarnation]
//	Session    [user, device, id, epoch, seq, gateway, state, status, [groups...],
//	            expires_at, updated, origin_node, origin_incarnation, version
//	            (, meta, info)]
//	Account    [user, override, authoritative_device, hlc_wall, hlc_logical,
//	            writer, origin_node, origin_incarnation, version
//	            (, text, emoji, until)]
//	LastSeen   [user, at, origin_node, origin_incarnation, version]
//
// The fields in parentheses are sent only when one of them is set, so a
// record without them is encoded as before they existed (and a decoder
// that predates them still reads it); decoders take either length.
//	Delta      [since, 0, Session] | [since, 1, Account] | [since, 2, LastSeen]
//	Deltas     [Delta...]
//	Digest     [[origin_node, origin_incarnation, watermark (, [after, through, ...])]...]
//	           the fourth element, the held runs, only when there are any
//	Sync       [[origin_node, origin_incarnation, watermark, gc_floor, full,
//	            [Session...], [Account...] (, [LastSeen...] (, drop_after,
//	            drop_through, [after, through, ...]))]...]
//	           the eighth element only when the origin has last-seen
//	           writes to send or a drop range (then maybe empty); the last
//	           three, a page's drop range and the runs it keeps
//	           (OriginSync.Drop), only on a page of a paged snapshot
//
// A decoder that predates the LastSeen record refuses a delta batch or a
// sync that holds one (an unknown delta kind, an origin of 8 elements);
// see gossip's LastSeenReady for how the writes wait for every member to
// know them. One that predates drop ranges refuses an origin of 11.

// Decoder limits.
const (
	MaxBatchDeltas   = 1 << 16 // deltas in one batch
	MaxDigestOrigins = 1 << 16 // origins in one digest
	MaxDigestSpans   = 1 << 20 // held runs in one digest, all origins
	MaxSyncRecords   = 1 << 24 // records in one sync
)

// ErrDecode is wrapped by every decoding failure.
var ErrDecode = errors.New("decode")

const (
	kindSession  = 0
	kindAccount  = 1
	kindLastSeen = 2
)

// AppendDeltas encodes a batch of deltas.
func AppendDeltas(buf []byte, ds []Delta) ([]byte, error) {
	w := bytes.NewBuffer(buf)
	enc := msgpack.NewEncoder(w)
	if err := enc.EncodeArrayLen(len(ds)); err != nil {
		return nil, err
	}
	for i := range ds {
		if err := encodeDelta(enc, &ds[i]); err != nil {
			return nil, err
		}
	}
	return w.Bytes(), nil
}

// EncodedDeltaSize returns the encoded size of one delta within a batch.
func EncodedDeltaSize(d *Delta) int {
	var w bytes.Buffer
	enc := msgpack.NewEncoder(&w)
	_ = encodeDelta(enc, d)
	return w.Len()
}

// DecodeDeltas decodes and validates a batch of deltas.
func DecodeDeltas(b []byte) ([]Delta, error) {
	dec, done := newDecoder(b)
	defer done()
	n, err := arrayLen(dec, 0, MaxBatchDeltas)
	if err != nil {
		return nil, err
	}
	out := make([]Delta, 0, min(n, 64))
	for range n {
		d, err := decodeDelta(dec)
		if err != nil {
			return nil, err
		}
		if err := d.Validate(); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrDecode, err)
		}
		out = append(out, d)
	}
	if err := expectEnd(dec); err != nil {
		return nil, err
	}
	return out, nil
}

// DigestSize returns len(AppendDigest(nil, d)) without encoding it.
func DigestSize(d Digest) int {
	n := arrSize(len(d))
	for _, e := range d {
		n += 1 + strSize(len(e.Origin.Node)) + uintSize(e.Origin.Incarnation) + uintSize(e.Watermark)
		if len(e.Held) > 0 {
			n += arrSize(2 * len(e.Held))
			for _, sp := range e.Held {
				n += uintSize(sp.After) + uintSize(sp.Through)
			}
		}
	}
	return n
}

// Encoded sizes of msgpack's headers and unsigned integers, as the
// encoder writes them (the shortest form).
func arrSize(n int) int {
	switch {
	case n < 16:
		return 1
	case n <= math.MaxUint16:
		return 3
	}
	return 5
}

func strSize(n int) int {
	switch {
	case n < 32:
		return 1 + n
	case n < 256:
		return 2 + n
	case n <= math.MaxUint16:
		return 3 + n
	}
	return 5 + n
}

func uintSize(v uint64) int {
	switch {
	case v <= math.MaxInt8:
		return 1
	case v <= math.MaxUint8:
		return 2
	case v <= math.MaxUint16:
		return 3
	case v <= math.MaxUint32:
		return 5
	}
	return 9
}

// AppendDigest encodes a digest.
func AppendDigest(buf []byte, d Digest) ([]byte, error) {
	w := bytes.NewBuffer(buf)
	enc := msgpack.NewEncoder(w)
	if err := enc.EncodeArrayLen(len(d)); err != nil {
		return nil, err
	}
	for _, e := range d {
		fields := 3
		if len(e.Held) > 0 {
			fields = 4
		}
		if err := encodeAll(enc, arr(fields), e.Origin.Node, e.Origin.Incarnation, e.Watermark); err != nil {
			return nil, err
		}
		if fields == 4 {
			if err := enc.EncodeArrayLen(2 * len(e.Held)); err != nil {
				return nil, err
			}
			for _, sp := range e.Held {
				if err := encodeAll(enc, sp.After, sp.Through); err != nil {
					return nil, err
				}
			}
		}
	}
	return w.Bytes(), nil
}

// newDecoder returns a decoder of b from msgpack's pool, and the function
// that returns it there. A gateway decodes every delta batch it receives,
// most of them of one delta: a decoder made for each was a third of the
// bytes decoding one delta allocated. Nothing decoded refers to the
// decoder or to b.
func newDecoder(b []byte) (*msgpack.Decoder, func()) {
	r := bytes.NewReader(b)
	dec := msgpack.GetDecoder()
	dec.Reset(r)
	return dec, func() { msgpack.PutDecoder(dec) }
}

// DecodeDigest decodes a digest.
func DecodeDigest(b []byte) (Digest, error) {
	dec, done := newDecoder(b)
	defer done()
	n, err := arrayLen(dec, 0, MaxDigestOrigins)
	if err != nil {
		return nil, err
	}
	out := make(Digest, 0, min(n, 256))
	spans := 0
	for range n {
		fields, err := arrayLen(dec, 3, 4)
		if err != nil {
			return nil, err
		}
		var e DigestEntry
		if e.Origin.Node, err = str(dec); err != nil {
			return nil, err
		}
		if e.Origin.Incarnation, err = u64(dec); err != nil {
			return nil, err
		}
		if e.Watermark, err = u64(dec); err != nil {
			return nil, err
		}
		if e.Origin.Node == "" {
			return nil, fmt.Errorf("%w: digest entry without a node", ErrDecode)
		}
		if fields == 4 {
			if e.Held, err = decodeHeld(dec, e.Watermark, MaxDigestSpans-spans); err != nil {
				return nil, err
			}
			spans += len(e.Held)
		}
		out = append(out, e)
	}
	if err := expectEnd(dec); err != nil {
		return nil, err
	}
	return out, nil
}

// AppendSync encodes a sync.
func AppendSync(buf []byte, s Sync) ([]byte, error) {
	w := bytes.NewBuffer(buf)
	enc := msgpack.NewEncoder(w)
	if err := enc.EncodeArrayLen(len(s)); err != nil {
		return nil, err
	}
	for i := range s {
		os := &s[i]
		fields := 7
		if len(os.LastSeen) > 0 {
			fields = 8
		}
		if os.Drop != nil {
			fields = 11
		}
		if err := encodeAll(enc, arr(fields), os.Origin.Node, os.Origin.Incarnation, os.Watermark, os.GCFloor, os.Full, arr(len(os.Sessions))); err != nil {
			return nil, err
		}
		for j := range os.Sessions {
			if err := encodeSession(enc, &os.Sessions[j]); err != nil {
				return nil, err
			}
		}
		if err := enc.EncodeArrayLen(len(os.Accounts)); err != nil {
			return nil, err
		}
		for j := range os.Accounts {
			if err := encodeAccount(enc, &os.Accounts[j]); err != nil {
				return nil, err
			}
		}
		if fields >= 8 {
			if err := enc.EncodeArrayLen(len(os.LastSeen)); err != nil {
				return nil, err
			}
			for j := range os.LastSeen {
				if err := encodeLastSeen(enc, &os.LastSeen[j]); err != nil {
					return nil, err
				}
			}
		}
		if d := os.Drop; d != nil {
			if err := encodeAll(enc, d.After, d.Through, arr(2*len(d.Keep))); err != nil {
				return nil, err
			}
			for _, sp := range d.Keep {
				if err := encodeAll(enc, sp.After, sp.Through); err != nil {
					return nil, err
				}
			}
		}
	}
	return w.Bytes(), nil
}

// DecodeSync decodes and validates a sync.
func DecodeSync(b []byte) (Sync, error) {
	dec, done := newDecoder(b)
	defer done()
	n, err := arrayLen(dec, 0, MaxDigestOrigins)
	if err != nil {
		return nil, err
	}
	out := make(Sync, 0, min(n, 256))
	total := 0
	for range n {
		fields, err := arrayLen(dec, 7, 11)
		if err != nil {
			return nil, err
		}
		if fields > 8 && fields != 11 {
			return nil, fmt.Errorf("%w: sync entry of %d fields, want 7, 8 or 11", ErrDecode, fields)
		}
		var os OriginSync
		if os.Origin.Node, err = str(dec); err != nil {
			return nil, err
		}
		if os.Origin.Incarnation, err = u64(dec); err != nil {
			return nil, err
		}
		if os.Watermark, err = u64(dec); err != nil {
			return nil, err
		}
		if os.GCFloor, err = u64(dec); err != nil {
			return nil, err
		}
		if os.Full, err = dec.DecodeBool(); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrDecode, err)
		}
		ns, err := arrayLen(dec, 0, MaxSyncRecords-total)
		if err != nil {
			return nil, err
		}
		total += ns
		os.Sessions = make([]Session, 0, min(ns, 1024))
		for range ns {
			s, err := decodeSession(dec)
			if err != nil {
				return nil, err
			}
			os.Sessions = append(os.Sessions, s)
		}
		na, err := arrayLen(dec, 0, MaxSyncRecords-total)
		if err != nil {
			return nil, err
		}
		total += na
		os.Accounts = make([]Account, 0, min(na, 1024))
		for range na {
			a, err := decodeAccount(dec)
			if err != nil {
				return nil, err
			}
			os.Accounts = append(os.Accounts, a)
		}
		if fields >= 8 {
			// With a drop range, the last seen writes come first, maybe
			// none.
			least := 1
			if fields == 11 {
				least = 0
			}
			nl, err := arrayLen(dec, least, MaxSyncRecords-total)
			if err != nil {
				return nil, err
			}
			total += nl
			if nl > 0 {
				os.LastSeen = make([]LastSeen, 0, min(nl, 1024))
			}
			for range nl {
				ls, err := decodeLastSeen(dec)
				if err != nil {
					return nil, err
				}
				os.LastSeen = append(os.LastSeen, ls)
			}
		}
		if fields == 11 {
			d := &DropRange{}
			if d.After, err = u64(dec); err != nil {
				return nil, err
			}
			if d.Through, err = u64(dec); err != nil {
				return nil, err
			}
			if d.Keep, err = decodeSpans(dec, d.After, 0, MaxSyncRecords-total); err != nil {
				return nil, err
			}
			total += len(d.Keep)
			os.Drop = d
		}
		out = append(out, os)
	}
	if err := expectEnd(dec); err != nil {
		return nil, err
	}
	if err := out.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrDecode, err)
	}
	return out, nil
}

// arr marks an array header in encodeAll.
type arr int

func encodeAll(enc *msgpack.Encoder, vals ...any) error {
	for _, v := range vals {
		var err error
		switch v := v.(type) {
		case arr:
			err = enc.EncodeArrayLen(int(v))
		case string:
			err = enc.EncodeString(v)
		case uint64:
			err = enc.EncodeUint(v)
		case int64:
			err = enc.EncodeInt(v)
		case uint8:
			err = enc.EncodeUint(uint64(v))
		case uint32:
			err = enc.EncodeUint(uint64(v))
		case bool:
			err = enc.EncodeBool(v)
		default:
			err = fmt.Errorf("crdt: cannot encode %T", v)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func encodeDelta(enc *msgpack.Encoder, d *Delta) error {
	if d.Session != nil {
		if err := encodeAll(enc, arr(3), d.Since, uint8(kindSession)); err != nil {
			return err
		}
		return encodeSession(enc, d.Session)
	}
	if d.LastSeen != nil {
		if err := encodeAll(enc, arr(3), d.Since, uint8(kindLastSeen)); err != nil {
			return err
		}
		return encodeLastSeen(enc, d.LastSeen)
	}
	if d.Account == nil {
		return errors.New("crdt: empty delta")
	}
	if err := encodeAll(enc, arr(3), d.Since, uint8(kindAccount)); err != nil {
		return err
	}
	return encodeAccount(enc, d.Account)
}

func encodeLastSeen(enc *msgpack.Encoder, ls *LastSeen) error {
	return encodeAll(enc, arr(5), ls.User, ls.At, ls.Origin.Node, ls.Origin.Incarnation, ls.Version)
}

func decodeLastSeen(dec *msgpack.Decoder) (LastSeen, error) {
	var ls LastSeen
	if _, err := arrayLen(dec, 5, 5); err != nil {
		return ls, err
	}
	var err error
	if ls.User, err = str(dec); err != nil {
		return ls, err
	}
	if ls.At, err = i64(dec); err != nil {
		return ls, err
	}
	if ls.Origin.Node, err = str(dec); err != nil {
		return ls, err
	}
	if ls.Origin.Incarnation, err = u64(dec); err != nil {
		return ls, err
	}
	if ls.Version, err = u64(dec); err != nil {
		return ls, err
	}
	return ls, nil
}

func encodeSession(enc *msgpack.Encoder, s *Session) error {
	fields := 14
	if s.Meta != "" || s.Info != "" {
		fields = 16
	}
	if err := encodeAll(enc, arr(fields), s.User, s.Device, s.ID, s.Epoch, s.Seq, s.Gateway,
		uint8(s.State), uint8(s.Status), arr(len(s.Groups))); err != nil {
		return err
	}
	for _, g := range s.Groups {
		if err := enc.EncodeString(g); err != nil {
			return err
		}
	}
	if err := encodeAll(enc, s.ExpiresAt, s.Updated, s.Origin.Node, s.Origin.Incarnation, s.Version); err != nil {
		return err
	}
	if fields == 16 {
		return encodeAll(enc, s.Meta, s.Info)
	}
	return nil
}

func encodeAccount(enc *msgpack.Encoder, a *Account) error {
	fields := 9
	if a.Text != "" || a.Emoji != "" || a.Until != 0 {
		fields = 12
	}
	if err := encodeAll(enc, arr(fields), a.User, uint8(a.Override), a.AuthoritativeDevice, a.Stamp.Wall,
		a.Stamp.Logical, a.Writer, a.Origin.Node, a.Origin.Incarnation, a.Version); err != nil {
		return err
	}
	if fields == 12 {
		return encodeAll(enc, a.Text, a.Emoji, a.Until)
	}
	return nil
}

func decodeDelta(dec *msgpack.Decoder) (Delta, error) {
	var d Delta
	if _, err := arrayLen(dec, 3, 3); err != nil {
		return d, err
	}
	var err error
	if d.Since, err = u64(dec); err != nil {
		return d, err
	}
	kind, err := u64(dec)
	if err != nil {
		return d, err
	}
	switch kind {
	case kindSession:
		s, err := decodeSession(dec)
		if err != nil {
			return d, err
		}
		d.Session = &s
	case kindAccount:
		a, err := decodeAccount(dec)
		if err != nil {
			return d, err
		}
		d.Account = &a
	case kindLastSeen:
		ls, err := decodeLastSeen(dec)
		if err != nil {
			return d, err
		}
		d.LastSeen = &ls
	default:
		return d, fmt.Errorf("%w: unknown delta kind %d", ErrDecode, kind)
	}
	return d, nil
}

func decodeSession(dec *msgpack.Decoder) (Session, error) {
	var s Session
	fields, err := arrayLen(dec, 14, 16)
	if err != nil {
		return s, err
	}
	if fields == 15 {
		return s, fmt.Errorf("%w: session of 15 fields, want 14 or 16", ErrDecode)
	}
	var state, status uint64
	for _, f := range []func() error{
		func() error { s.User, err = str(dec); return err },
		func() error { s.Device, err = str(dec); return err },
		func() error { s.ID, err = str(dec); return err },
		func() error { s.Epoch, err = u64(dec); return err },
		func() error { s.Seq, err = u64(dec); return err },
		func() error { s.Gateway, err = str(dec); return err },
		func() error { state, err = u64(dec); return err },
		func() error { status, err = u64(dec); return err },
	} {
		if err := f(); err != nil {
			return s, err
		}
	}
	if state > uint64(maxStateEnum) || status > uint64(StatusBusy) {
		return s, fmt.Errorf("%w: session state %d, status %d", ErrDecode, state, status)
	}
	s.State, s.Status = State(state), Status(status)
	ng, err := arrayLen(dec, 0, MaxGroups)
	if err != nil {
		return s, err
	}
	if ng > 0 {
		s.Groups = make([]string, ng)
		for i := range s.Groups {
			if s.Groups[i], err = str(dec); err != nil {
				return s, err
			}
		}
	}
	if s.ExpiresAt, err = i64(dec); err != nil {
		return s, err
	}
	if s.Updated, err = i64(dec); err != nil {
		return s, err
	}
	if s.Origin.Node, err = str(dec); err != nil {
		return s, err
	}
	if s.Origin.Incarnation, err = u64(dec); err != nil {
		return s, err
	}
	if s.Version, err = u64(dec); err != nil {
		return s, err
	}
	if fields == 16 {
		if s.Meta, err = strMax(dec, MaxMetaBytes); err != nil {
			return s, err
		}
		if s.Info, err = strMax(dec, MaxInfoBytes); err != nil {
			return s, err
		}
	}
	return s, nil
}

func decodeAccount(dec *msgpack.Decoder) (Account, error) {
	var a Account
	fields, err := arrayLen(dec, 9, 12)
	if err != nil {
		return a, err
	}
	if fields != 9 && fields != 12 {
		return a, fmt.Errorf("%w: account of %d fields, want 9 or 12", ErrDecode, fields)
	}
	if a.User, err = str(dec); err != nil {
		return a, err
	}
	ov, err := u64(dec)
	if err != nil {
		return a, err
	}
	if ov > uint64(maxOverrideEnum) {
		return a, fmt.Errorf("%w: account override %d", ErrDecode, ov)
	}
	a.Override = Override(ov)
	if a.AuthoritativeDevice, err = str(dec); err != nil {
		return a, err
	}
	if a.Stamp.Wall, err = i64(dec); err != nil {
		return a, err
	}
	logical, err := u64(dec)
	if err != nil {
		return a, err
	}
	if logical > 1<<32-1 {
		return a, fmt.Errorf("%w: hlc logical %d overflows", ErrDecode, logical)
	}
	a.Stamp.Logical = uint32(logical)
	if a.Writer, err = str(dec); err != nil {
		return a, err
	}
	if a.Origin.Node, err = str(dec); err != nil {
		return a, err
	}
	if a.Origin.Incarnation, err = u64(dec); err != nil {
		return a, err
	}
	if a.Version, err = u64(dec); err != nil {
		return a, err
	}
	if fields == 12 {
		if a.Text, err = strMax(dec, 4*MaxStatusTextChars); err != nil {
			return a, err
		}
		if a.Emoji, err = strMax(dec, MaxStatusEmojiBytes); err != nil {
			return a, err
		}
		if a.Until, err = i64(dec); err != nil {
			return a, err
		}
		if err := CheckStatusText(a.Text, a.Emoji); err != nil {
			return a, fmt.Errorf("%w: account %q: %w", ErrDecode, a.User, err)
		}
	}
	return a, nil
}

func arrayLen(dec *msgpack.Decoder, lo, hi int) (int, error) {
	n, err := dec.DecodeArrayLen()
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrDecode, err)
	}
	if n < lo || n > hi {
		return 0, fmt.Errorf("%w: array of %d, want %d..%d", ErrDecode, n, lo, hi)
	}
	return n, nil
}

func str(dec *msgpack.Decoder) (string, error) { return strMax(dec, MaxNameLen) }

// strMax decodes a string of at most max bytes.
func strMax(dec *msgpack.Decoder, max int) (string, error) {
	c, err := dec.PeekCode()
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrDecode, err)
	}
	// fixstr, str8, str16, str32. The decoder grows its buffer only as input
	// arrives, so a lying length costs at most the input's size.
	if !((c >= 0xa0 && c <= 0xbf) || c == 0xd9 || c == 0xda || c == 0xdb) {
		return "", fmt.Errorf("%w: want a string, got code 0x%02x", ErrDecode, c)
	}
	s, err := dec.DecodeString()
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrDecode, err)
	}
	if len(s) > max {
		return "", fmt.Errorf("%w: string of %d bytes (max %d)", ErrDecode, len(s), max)
	}
	return s, nil
}

func u64(dec *msgpack.Decoder) (uint64, error) {
	c, err := dec.PeekCode()
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrDecode, err)
	}
	// positive fixint, uint8..uint64
	if !(c <= 0x7f || (c >= 0xcc && c <= 0xcf)) {
		return 0, fmt.Errorf("%w: want an unsigned integer, got code 0x%02x", ErrDecode, c)
	}
	v, err := dec.DecodeUint64()
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrDecode, err)
	}
	return v, nil
}

func i64(dec *msgpack.Decoder) (int64, error) {
	v, err := dec.DecodeInt64()
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrDecode, err)
	}
	return v, nil
}

func expectEnd(dec *msgpack.Decoder) error {
	if _, err := dec.PeekCode(); err == nil {
		return fmt.Errorf("%w: trailing bytes", ErrDecode)
	}
	return nil
}

// decodeHeld reads held runs: sorted, disjoint, non-empty, above the
// watermark, at most max of them.
func decodeHeld(dec *msgpack.Decoder, watermark uint64, max int) ([]Span, error) {
	return decodeSpans(dec, watermark, 1, max)
}

// decodeSpans reads from least to most runs, flattened to pairs: sorted,
// disjoint, non-empty, above after.
func decodeSpans(dec *msgpack.Decoder, after uint64, least, most int) ([]Span, error) {
	watermark := after
	n, err := arrayLen(dec, 2*least, 2*most)
	if err != nil {
		return nil, err
	}
	if n%2 != 0 {
		return nil, fmt.Errorf("%w: runs need pairs, got %d numbers", ErrDecode, n)
	}
	held := make([]Span, 0, min(n/2, 1024))
	prev := watermark
	for range n / 2 {
		var sp Span
		if sp.After, err = u64(dec); err != nil {
			return nil, err
		}
		if sp.Through, err = u64(dec); err != nil {
			return nil, err
		}
		if sp.After < prev || sp.Through <= sp.After {
			return nil, fmt.Errorf("%w: run (%d, %d] out of order or empty", ErrDecode, sp.After, sp.Through)
		}
		held = append(held, sp)
		prev = sp.Through
	}
	return held, nil
}
