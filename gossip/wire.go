package gossip

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/rollcall/rollcall/crdt"
)

// Gossip wire format. Every Rollcall message that rides memberlist (as a
// best-effort packet, a reliable stream message, a piggybacked broadcast or
// push/pull state) starts with a two-byte header:
//
//	byte 0: wireVersion
//	byte 1: message type
//
// followed by a msgpack payload (crdt payloads use crdt's codec):
//
//	msgDeltas    crdt Deltas                          owner writes, batched
//	msgAlive     [node, inc, watermark, sessions, client_addr]
//	             an origin's periodic announcement: refreshes its lease and
//	             lets receivers detect a lost delta (watermark ahead of theirs)
//	msgPull      [from_node, crdt Digest]              "send me what I lack"
//	msgSync      crdt Sync                             answer to a pull/digest
//	msgRoute     [req_id, from_node, to, from, from_device, body]
//	msgRouteAck  [req_id, delivered, error]
//	msgKey       [op, key, req_id, from_node]         keyring rotation step;
//	             answered with a msgRouteAck (delivered 1, or an error)
//	msgState     [from_node, crdt Digest]              push/pull local state
//	msgLeaving   [node, inc, watermark, sessions, client_addr] (as alive)
//	             a graceful leave is coming: the member is "left", not
//	             failed, and is not reconnected to (serf's leave intent)
//
// Protocol flow. Writes: owner -> every member (eager, UDP, batches of a few
// ms under the packet budget; a larger batch goes over TCP) or -> piggyback
// queue (epidemic). Repair: every AliveInterval each owner announces its
// watermark; a receiver whose watermark stays behind across two
// announcements pulls (msgPull over TCP) and gets a msgSync with exactly what
// it lacks. memberlist's push/pull carries msgState both ways and each side
// answers the other's digest with a msgSync. Routing: msgRoute to the owning
// gateway over TCP, msgRouteAck back.
//
// Version history: 1, the first.
const wireVersion = 1

type msgType uint8

const (
	msgDeltas msgType = iota + 1
	msgAlive
	msgPull
	msgSync
	msgRoute
	msgRouteAck
	msgKey
	msgState
	msgLeaving
	msgTypeMax = msgLeaving
)

func (t msgType) String() string {
	names := [...]string{"?", "deltas", "alive", "pull", "sync", "route", "route-ack", "key", "state", "leaving"}
	if int(t) < len(names) {
		return names[t]
	}
	return fmt.Sprintf("msg(%d)", uint8(t))
}

// Limits.
const (
	// DefaultPacketBudget is the payload budget of one best-effort packet:
	// memberlist's 1,400-byte UDPBufferSize less its user-message, CRC,
	// compound, label and encryption overheads, with margin.
	DefaultPacketBudget = 1300
	// maxStreamMessage bounds a message read from a stream.
	maxStreamMessage = 64 << 20
	maxBodyBytes     = 64 << 10
)

// errBadMessage is wrapped by every gossip decoding failure.
var errBadMessage = errors.New("bad gossip message")

// alive is an origin's periodic announcement.
type alive struct {
	Origin     crdt.Origin
	Watermark  uint64
	Sessions   int
	ClientAddr string
}

// routeReq asks the owning gateway to deliver a message.
type routeReq struct {
	ID         uint64
	FromNode   string
	To         string
	From       string
	FromDevice string
	Body       []byte
}

// routeAck answers a routeReq.
type routeAck struct {
	ID        uint64
	Delivered int
	Err       string
}

// keyOp is a keyring rotation step sent to every member, each of which
// acknowledges it.
type keyOp struct {
	Op       string // install | use | remove
	Key      []byte
	ID       uint64
	FromNode string
}

// digestMsg is a pull request or push/pull state: who asks, and what it has.
type digestMsg struct {
	From   string
	Digest crdt.Digest
}

func header(t msgType) []byte { return []byte{wireVersion, byte(t)} }

func encodeDeltas(ds []crdt.Delta) ([]byte, error) {
	return crdt.AppendDeltas(header(msgDeltas), ds)
}

func encodeSync(s crdt.Sync) ([]byte, error) { return crdt.AppendSync(header(msgSync), s) }

func encodeDigestMsg(t msgType, m digestMsg) ([]byte, error) {
	buf := bytes.NewBuffer(header(t))
	enc := msgpack.NewEncoder(buf)
	if err := enc.EncodeArrayLen(2); err != nil {
		return nil, err
	}
	if err := enc.EncodeString(m.From); err != nil {
		return nil, err
	}
	d, err := crdt.AppendDigest(nil, m.Digest)
	if err != nil {
		return nil, err
	}
	if err := enc.EncodeBytes(d); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func encodeMsg(t msgType, fields ...any) ([]byte, error) {
	buf := bytes.NewBuffer(header(t))
	enc := msgpack.NewEncoder(buf)
	if err := enc.EncodeArrayLen(len(fields)); err != nil {
		return nil, err
	}
	for _, f := range fields {
		if err := enc.Encode(f); err != nil {
			return nil, err
		}
	}
	return buf.Bytes(), nil
}

func encodeAlive(a alive) ([]byte, error) { return encodeAliveAs(msgAlive, a) }

func encodeAliveAs(t msgType, a alive) ([]byte, error) {
	return encodeMsg(t, a.Origin.Node, a.Origin.Incarnation, a.Watermark, a.Sessions, a.ClientAddr)
}

func encodeRouteReq(r routeReq) ([]byte, error) {
	return encodeMsg(msgRoute, r.ID, r.FromNode, r.To, r.From, r.FromDevice, r.Body)
}

func encodeRouteAck(r routeAck) ([]byte, error) {
	return encodeMsg(msgRouteAck, r.ID, r.Delivered, r.Err)
}

func encodeKeyOp(k keyOp) ([]byte, error) { return encodeMsg(msgKey, k.Op, k.Key, k.ID, k.FromNode) }

// splitHeader checks the header and returns the type and payload.
func splitHeader(b []byte) (msgType, []byte, error) {
	if len(b) < 2 {
		return 0, nil, fmt.Errorf("%w: %d bytes", errBadMessage, len(b))
	}
	if b[0] != wireVersion {
		return 0, nil, fmt.Errorf("%w: wire version %d, want %d", errBadMessage, b[0], wireVersion)
	}
	t := msgType(b[1])
	if t == 0 || t > msgTypeMax {
		return 0, nil, fmt.Errorf("%w: unknown type %d", errBadMessage, b[1])
	}
	return t, b[2:], nil
}

// fieldDecoder reads a fixed-length msgpack array field by field, checking
// types and sizes.
type fieldDecoder struct {
	r   *bytes.Reader // unbuffered under dec: r.Len() is what is left
	dec *msgpack.Decoder
	err error
}

func newFieldDecoder(b []byte, n int) *fieldDecoder {
	r := bytes.NewReader(b)
	fd := &fieldDecoder{r: r, dec: msgpack.NewDecoder(r)}
	l, err := fd.dec.DecodeArrayLen()
	switch {
	case err != nil:
		fd.err = fmt.Errorf("%w: %w", errBadMessage, err)
	case l != n:
		fd.err = fmt.Errorf("%w: %d fields, want %d", errBadMessage, l, n)
	}
	return fd
}

func (fd *fieldDecoder) str(max int) string { return string(fd.raw(max)) }

// raw reads a msgpack str or bin of at most max bytes, checking the length
// against max and against the input left before allocating.
func (fd *fieldDecoder) raw(max int) []byte {
	if fd.err != nil {
		return nil
	}
	n, err := fd.dec.DecodeBytesLen()
	switch {
	case err != nil:
		fd.err = fmt.Errorf("%w: %w", errBadMessage, err)
	case n < 0:
		return nil // nil
	case n > max:
		fd.err = fmt.Errorf("%w: field of %d bytes (max %d)", errBadMessage, n, max)
	case n > fd.r.Len():
		fd.err = fmt.Errorf("%w: field of %d bytes with %d left", errBadMessage, n, fd.r.Len())
	default:
		b := make([]byte, n)
		if _, err := io.ReadFull(fd.r, b); err != nil {
			fd.err = fmt.Errorf("%w: %w", errBadMessage, err)
		}
		return b
	}
	return nil
}

func (fd *fieldDecoder) u64() uint64 {
	if fd.err != nil {
		return 0
	}
	v, err := fd.dec.DecodeUint64()
	if err != nil {
		fd.err = fmt.Errorf("%w: %w", errBadMessage, err)
	}
	return v
}

func (fd *fieldDecoder) int() int {
	if fd.err != nil {
		return 0
	}
	v, err := fd.dec.DecodeInt()
	if err != nil {
		fd.err = fmt.Errorf("%w: %w", errBadMessage, err)
	}
	return v
}

func (fd *fieldDecoder) bytes(max int) []byte { return fd.raw(max) }

func (fd *fieldDecoder) done() error {
	if fd.err != nil {
		return fd.err
	}
	if _, err := fd.dec.PeekCode(); err == nil {
		return fmt.Errorf("%w: trailing bytes", errBadMessage)
	}
	return nil
}

func decodeAlive(b []byte) (alive, error) {
	fd := newFieldDecoder(b, 5)
	a := alive{Origin: crdt.Origin{Node: fd.str(crdt.MaxNameLen), Incarnation: fd.u64()},
		Watermark: fd.u64(), Sessions: fd.int(), ClientAddr: fd.str(crdt.MaxNameLen)}
	if err := fd.done(); err != nil {
		return alive{}, err
	}
	if a.Origin.Node == "" || a.Sessions < 0 {
		return alive{}, fmt.Errorf("%w: alive without a node", errBadMessage)
	}
	return a, nil
}

func decodeDigestMsg(b []byte) (digestMsg, error) {
	fd := newFieldDecoder(b, 2)
	m := digestMsg{From: fd.str(crdt.MaxNameLen)}
	raw := fd.bytes(maxStreamMessage)
	if err := fd.done(); err != nil {
		return digestMsg{}, err
	}
	if m.From == "" {
		return digestMsg{}, fmt.Errorf("%w: digest without a sender", errBadMessage)
	}
	d, err := crdt.DecodeDigest(raw)
	if err != nil {
		return digestMsg{}, fmt.Errorf("%w: %w", errBadMessage, err)
	}
	m.Digest = d
	return m, nil
}

func decodeRouteReq(b []byte) (routeReq, error) {
	fd := newFieldDecoder(b, 6)
	r := routeReq{ID: fd.u64(), FromNode: fd.str(crdt.MaxNameLen), To: fd.str(crdt.MaxNameLen),
		From: fd.str(crdt.MaxNameLen), FromDevice: fd.str(crdt.MaxNameLen), Body: fd.bytes(maxBodyBytes)}
	if err := fd.done(); err != nil {
		return routeReq{}, err
	}
	if r.FromNode == "" || r.To == "" {
		return routeReq{}, fmt.Errorf("%w: route without sender or recipient", errBadMessage)
	}
	return r, nil
}

func decodeRouteAck(b []byte) (routeAck, error) {
	fd := newFieldDecoder(b, 3)
	r := routeAck{ID: fd.u64(), Delivered: fd.int(), Err: fd.str(1024)}
	if err := fd.done(); err != nil {
		return routeAck{}, err
	}
	if r.Delivered < 0 {
		return routeAck{}, fmt.Errorf("%w: negative delivery count", errBadMessage)
	}
	return r, nil
}

func decodeKeyOp(b []byte) (keyOp, error) {
	fd := newFieldDecoder(b, 4)
	k := keyOp{Op: fd.str(16), Key: fd.bytes(64), ID: fd.u64(), FromNode: fd.str(crdt.MaxNameLen)}
	if err := fd.done(); err != nil {
		return keyOp{}, err
	}
	switch k.Op {
	case "install", "use", "remove":
	default:
		return keyOp{}, fmt.Errorf("%w: unknown key op %q", errBadMessage, k.Op)
	}
	if n := len(k.Key); n != 16 && n != 24 && n != 32 {
		return keyOp{}, fmt.Errorf("%w: key of %d bytes", errBadMessage, n)
	}
	return k, nil
}

// message is one decoded gossip message; exactly one field is set.
type message struct {
	typ    msgType
	deltas []crdt.Delta
	alive  alive
	digest digestMsg
	sync   crdt.Sync
	route  routeReq
	ack    routeAck
	key    keyOp
}

// decodeMessage decodes any gossip message. It never panics; garbage is an
// error wrapping errBadMessage.
func decodeMessage(b []byte) (message, error) {
	t, payload, err := splitHeader(b)
	if err != nil {
		return message{}, err
	}
	m := message{typ: t}
	switch t {
	case msgDeltas:
		m.deltas, err = crdt.DecodeDeltas(payload)
	case msgAlive, msgLeaving:
		m.alive, err = decodeAlive(payload)
	case msgPull, msgState:
		m.digest, err = decodeDigestMsg(payload)
	case msgSync:
		m.sync, err = crdt.DecodeSync(payload)
	case msgRoute:
		m.route, err = decodeRouteReq(payload)
	case msgRouteAck:
		m.ack, err = decodeRouteAck(payload)
	case msgKey:
		m.key, err = decodeKeyOp(payload)
	}
	if err != nil {
		if !errors.Is(err, errBadMessage) {
			err = fmt.Errorf("%w: %s: %w", errBadMessage, t, err)
		}
		return message{}, err
	}
	return m, nil
}
