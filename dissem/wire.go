package dissem

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/rollcall/rollcall/crdt"
)

// Gossip wire format. Every Rollcall message that rides memberlist (as a
// best-effort packet, a reliable stream message, a piggybacked broadcast or
// push/pull state) starts with a two-byte header:
//
//	byte 0: WireVersion
//	byte 1: message type
//
// followed by a msgpack payload (crdt payloads use crdt's codec):
//
//	TypeDeltas    crdt Deltas                          owner writes, batched
//	TypeAlive     [node, inc, watermark, sessions, client_addr]
//	             an origin's periodic announcement: refreshes its lease and
//	             lets receivers detect a lost delta (watermark ahead of theirs)
//	TypePull      [from_node, crdt Digest]              "send me what I lack"
//	TypeSync      crdt Sync                             answer to a pull/digest,
//	             or the last page of a paged one
//	TypeSyncPage  [from_node, last, at, next, crdt Sync]  a page of an answer
//	             to a pull/digest; at and next are cursors [node, inc, after]:
//	             where this page starts and where the next one does; the
//	             top two bits of after are the pass of a paged snapshot
//	             (crdt.PagePass: 0 a difference, 1 its drop pass, 2 its full
//	             pass), node "" and after 0 the zero cursor (a first page)
//	TypePullPage  [from_node, crdt Digest, cursor]      "send me the page of
//	             your answer at cursor" (the next page of a paged answer)
//	TypeRoute     [req_id, from_node, to, from, from_device, body]
//	TypeRouteAck  [req_id, delivered, error]
//	TypeKey       [op, key, req_id, from_node]         keyring rotation step;
//	             answered with a TypeRouteAck (delivered 1, or an error)
//	TypeState     [from_node, crdt Digest]              push/pull local state
//	TypeLeaving   [node, inc, watermark, sessions, client_addr] (as alive)
//	             a graceful leave is coming: the member is "left", not
//	             failed, and is not reconnected to (serf's leave intent)
//	TypeKick      [req_id, from_node, user, device]    "end user's sessions
//	             you own (of device only, unless empty)"; answered with a
//	             TypeRouteAck (delivered: the sessions ended)
//	TypeRegionDeltas [region, from, via, crdt Deltas]   a batch of one
//	             region's writes crossing to another region: from the
//	             region's active bridge to another region's bridge over
//	             the WAN pool (via ""), then from that bridge to every
//	             member of its region (via: the relaying bridge)
//	TypeRegionAlive  [region, from, via, [[node, inc, watermark,
//	             client_addr]...]]  a region's announcement: its gateways
//	             shown up and their watermarks (the region's digest), sent
//	             and relayed as TypeRegionDeltas are
//	TypeRegionSync   [region, from, via, crdt Sync]     a region's records
//	             another region's bridge lacked (the answer to its
//	             TypePull over the WAN pool), relayed as the others are
//	TypeRouteVia  [req_id, from_node, gateway, to, from, from_device, body]
//	             "deliver to the sessions gateway owns" through the
//	             bridges, for a gateway of another region; answered hop by
//	             hop with a TypeRouteAck
//	TypeKickVia   [req_id, from_node, gateway, user, device]  a kick of the
//	             sessions gateway owns, through the bridges as TypeRouteVia
//	TypeBridgeWAN [region, from, "", [region...]]  a bridge-capable
//	             gateway tells every member of its region which other
//	             regions it sees over the WAN pool (the choice of the
//	             active bridge prefers those that see the most)
//	TypeListed    [node, inc, watermark, sessions, client_addr] (as alive)
//	             sent once by an owner to a member it has just listed: its
//	             writes up to watermark were made before it listed the
//	             member, so no delta brings them, and a receiver that lacks
//	             some pulls at once
//
// Protocol flow. Writes: owner -> every member (eager, UDP, batches of a few
// ms under the packet budget; a larger batch goes over TCP) or -> piggyback
// queue (epidemic). Repair: every AliveInterval each owner announces its
// watermark; a receiver whose watermark stays behind across two
// announcements pulls (TypePull over TCP) and gets a TypeSync with exactly what
// it lacks. A gateway answers in pages (TypeSyncPage, at most a page of
// records each, gossip Config.SyncPageBytes; each a valid Sync on its own,
// crdt Replica.DiffPage): the asker applies a page, then asks for the next
// with a TypePullPage carrying its digest as it is now and the page's next
// cursor, so pages arrive one at a time and in order, each sender holds
// only the page it is sending, and a transfer cut anywhere resumes where it
// stopped. The asker counts itself caught up at the last page. memberlist's
// push/pull carries TypeState both ways and each side
// answers the other's digest with a TypeSync. Routing: TypeRoute (and
// TypeKick) to the owning gateway over TCP, TypeRouteAck back.
//
// Version history: 1, the first; TypeSyncPage and TypePullPage added
// within version 1 (a member without them drops them as unknown types);
// TypeKick likewise (a member without it drops it, and the kick's request
// times out); the region types too (a member without them is a
// single-region gateway, which is never sent them); TypeBridgeWAN too (a
// gateway without it counts it as a bad message and drops it, and its own
// choice of the active bridge is the one before it); TypeListed too (a
// member without it drops it, and pulls what it lacks at the owner's
// second announcement that shows the gap).
const WireVersion = 1

type Type uint8

const (
	TypeDeltas Type = iota + 1
	TypeAlive
	TypePull
	TypeSync
	TypeRoute
	TypeRouteAck
	TypeKey
	TypeState
	TypeLeaving
	TypeSyncPage
	TypePullPage
	TypeKick
	TypeRegionDeltas
	TypeRegionAlive
	TypeRegionSync
	TypeRouteVia
	TypeKickVia
	TypeBridgeWAN
	TypeListed
	MaxType = TypeListed
)

func (t Type) String() string {
	names := [...]string{"?", "deltas", "alive", "pull", "sync", "route", "route-ack", "key", "state", "leaving", "sync-page", "pull-page", "kick",
		"region-deltas", "region-alive", "region-sync", "route-via", "kick-via", "bridge-wan", "listed"}
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
	// MaxStreamMessage bounds a message read from a stream.
	MaxStreamMessage = 64 << 20
	// DefaultSyncPageBytes is the records an anti-entropy answer carries
	// in one page (about; a page holds at least one record).
	DefaultSyncPageBytes = 1 << 20
	// MaxSyncPageBytes bounds a configured page, well under
	// MaxStreamMessage.
	MaxSyncPageBytes = 16 << 20
	MaxBodyBytes     = 64 << 10
)

// ErrBadMessage is wrapped by every gossip decoding failure.
var ErrBadMessage = errors.New("bad gossip message")

// Alive is an origin's periodic announcement.
type Alive struct {
	Origin     crdt.Origin
	Watermark  uint64
	Sessions   int
	ClientAddr string
}

// RouteReq asks the owning gateway to deliver a message.
type RouteReq struct {
	ID         uint64
	FromNode   string
	To         string
	From       string
	FromDevice string
	Body       []byte
}

// RouteVia asks for a message to be delivered to the sessions Gateway
// owns, through the bridges when Gateway is in another region: each hop
// sends it on with a request of its own and answers with what the next
// one answered.
type RouteVia struct {
	RouteReq
	Gateway string
}

// KickVia asks for a kick of the sessions Gateway owns, through the
// bridges as RouteVia is.
type KickVia struct {
	KickReq
	Gateway string
}

// RegionMsg is the header of a region message (TypeRegionDeltas,
// TypeRegionAlive, TypeRegionSync): the region whose records or gateways
// it carries, the bridge of that region that sent it over the WAN pool,
// and, once relayed inside the receiving region, the bridge that relayed
// it ("" over the WAN pool).
type RegionMsg struct {
	Region string
	From   string
	Via    string
	Nodes  []RegionNode // TypeRegionAlive
	// Reach (TypeBridgeWAN) are the other regions the sender sees over
	// the WAN pool: one of their bridges answered its pings lately.
	Reach []string
}

// RegionNode is one gateway of a region as its region's bridge announces
// it: the incarnation it runs, the bridge's watermark of it, its client
// address.
type RegionNode struct {
	Node        string
	Incarnation uint64
	Watermark   uint64
	ClientAddr  string
}

// MaxRegionNodes bounds the gateways a region announcement lists.
const MaxRegionNodes = 1 << 16

// RouteAck answers a RouteReq.
type RouteAck struct {
	ID        uint64
	Delivered int
	Err       string
}

// KickReq asks the gateway that owns a user's sessions to end them: every
// one of the user's it owns, or only Device's when Device is not empty.
type KickReq struct {
	ID       uint64
	FromNode string
	User     string
	Device   string
}

// KeyOp is a keyring rotation step sent to every member, each of which
// acknowledges it.
type KeyOp struct {
	Op       string // install | use | remove
	Key      []byte
	ID       uint64
	FromNode string
}

// DigestMsg is a pull request or push/pull state: who asks, and what it
// has; for a TypePullPage, also the page of the answer it asks for.
type DigestMsg struct {
	From   string
	Digest crdt.Digest
	Cursor crdt.PageCursor // TypePullPage
}

// SyncPage says where a page of a paged answer (TypeSyncPage) lies in it.
// Its records are the Message's Sync.
type SyncPage struct {
	From string          // the member answering
	At   crdt.PageCursor // where this page starts; zero for the first
	Next crdt.PageCursor // where the next page starts; zero when Last
	Last bool            // the answer's last page
}

func header(t Type) []byte { return []byte{WireVersion, byte(t)} }

func EncodeDeltas(ds []crdt.Delta) ([]byte, error) {
	return crdt.AppendDeltas(header(TypeDeltas), ds)
}

func EncodeSync(s crdt.Sync) ([]byte, error) { return crdt.AppendSync(header(TypeSync), s) }

// EncodeSyncPage encodes a page of a paged answer.
func EncodeSyncPage(p SyncPage, s crdt.Sync) ([]byte, error) {
	raw, err := crdt.AppendSync(nil, s)
	if err != nil {
		return nil, err
	}
	last := uint64(0)
	if p.Last {
		last = 1
	}
	return encodeMsg(TypeSyncPage, p.From, last, p.At.Origin.Node, p.At.Origin.Incarnation, cursorAfter(p.At),
		p.Next.Origin.Node, p.Next.Origin.Incarnation, cursorAfter(p.Next), raw)
}

// EncodePullPage encodes a request for the page of an answer at m.Cursor.
func EncodePullPage(m DigestMsg) ([]byte, error) {
	d, err := crdt.AppendDigest(nil, m.Digest)
	if err != nil {
		return nil, err
	}
	return encodeMsg(TypePullPage, m.From, d, m.Cursor.Origin.Node, m.Cursor.Origin.Incarnation, cursorAfter(m.Cursor))
}

func EncodeDigest(t Type, m DigestMsg) ([]byte, error) {
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

// DigestSize returns len(EncodeDigest(t, m)) without encoding it: a
// digest's encoding follows from its entries, and a driver that only
// models the bytes (the simulator) need not build them.
func DigestSize(m DigestMsg) int {
	d := crdt.DigestSize(m.Digest)
	n := len(header(0)) + 1 // the header, then an array of two
	switch l := len(m.From); {
	case l < 32:
		n += 1 + l
	case l < 256:
		n += 2 + l
	case l <= math.MaxUint16:
		n += 3 + l
	default:
		n += 5 + l
	}
	switch {
	case d < 256:
		n += 2
	case d <= math.MaxUint16:
		n += 3
	default:
		n += 5
	}
	return n + d
}

func encodeMsg(t Type, fields ...any) ([]byte, error) {
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

func EncodeAlive(a Alive) ([]byte, error) { return EncodeAliveAs(TypeAlive, a) }

func EncodeAliveAs(t Type, a Alive) ([]byte, error) {
	return encodeMsg(t, a.Origin.Node, a.Origin.Incarnation, a.Watermark, a.Sessions, a.ClientAddr)
}

func EncodeRouteReq(r RouteReq) ([]byte, error) {
	return encodeMsg(TypeRoute, r.ID, r.FromNode, r.To, r.From, r.FromDevice, r.Body)
}

func EncodeRouteAck(r RouteAck) ([]byte, error) {
	return encodeMsg(TypeRouteAck, r.ID, r.Delivered, r.Err)
}

// EncodeKickReq encodes a request to end a user's sessions.
func EncodeKickReq(k KickReq) ([]byte, error) {
	return encodeMsg(TypeKick, k.ID, k.FromNode, k.User, k.Device)
}

func EncodeKeyOp(k KeyOp) ([]byte, error) { return encodeMsg(TypeKey, k.Op, k.Key, k.ID, k.FromNode) }

// EncodeRouteVia encodes a message for a gateway's sessions, routed
// through the bridges.
func EncodeRouteVia(r RouteVia) ([]byte, error) {
	return encodeMsg(TypeRouteVia, r.ID, r.FromNode, r.Gateway, r.To, r.From, r.FromDevice, r.Body)
}

// EncodeKickVia encodes a kick routed through the bridges.
func EncodeKickVia(k KickVia) ([]byte, error) {
	return encodeMsg(TypeKickVia, k.ID, k.FromNode, k.Gateway, k.User, k.Device)
}

// NewRegionDeltas builds a batch of region h.Region's writes.
func NewRegionDeltas(h RegionMsg, ds []crdt.Delta) (*Message, error) {
	raw, err := crdt.AppendDeltas(nil, ds)
	if err != nil {
		return nil, err
	}
	b, err := encodeMsg(TypeRegionDeltas, h.Region, h.From, h.Via, raw)
	if err != nil {
		return nil, err
	}
	h.Nodes = nil
	return &Message{Type: TypeRegionDeltas, Region: h, Deltas: ds, Bytes: b}, nil
}

// NewRegionAlive builds a region's announcement of h.Nodes.
func NewRegionAlive(h RegionMsg) (*Message, error) {
	nodes := make([][]any, len(h.Nodes))
	for i, n := range h.Nodes {
		nodes[i] = []any{n.Node, n.Incarnation, n.Watermark, n.ClientAddr}
	}
	b, err := encodeMsg(TypeRegionAlive, h.Region, h.From, h.Via, nodes)
	if err != nil {
		return nil, err
	}
	return &Message{Type: TypeRegionAlive, Region: h, Bytes: b}, nil
}

// NewRegionSync builds region h.Region's records another region lacked.
func NewRegionSync(h RegionMsg, s crdt.Sync) (*Message, error) {
	raw, err := crdt.AppendSync(nil, s)
	if err != nil {
		return nil, err
	}
	b, err := encodeMsg(TypeRegionSync, h.Region, h.From, h.Via, raw)
	if err != nil {
		return nil, err
	}
	h.Nodes = nil
	return &Message{Type: TypeRegionSync, Region: h, Sync: s, Bytes: b}, nil
}

// MaxReachRegions bounds the regions a TypeBridgeWAN lists.
const MaxReachRegions = 1 << 10

// NewBridgeWAN builds a bridge-capable gateway's report to its region of
// the other regions it sees over the WAN pool (h.Reach).
func NewBridgeWAN(h RegionMsg) (*Message, error) {
	reach := h.Reach
	if reach == nil {
		reach = []string{}
	}
	b, err := encodeMsg(TypeBridgeWAN, h.Region, h.From, h.Via, reach)
	if err != nil {
		return nil, err
	}
	h.Nodes = nil
	return &Message{Type: TypeBridgeWAN, Region: h, Bytes: b}, nil
}

// Relayed returns m as the bridge via relays it inside its region.
func (m *Message) Relayed(via string) (*Message, error) {
	h := m.Region
	h.Via = via
	switch m.Type {
	case TypeRegionDeltas:
		return NewRegionDeltas(h, m.Deltas)
	case TypeRegionAlive:
		return NewRegionAlive(h)
	case TypeRegionSync:
		return NewRegionSync(h, m.Sync)
	}
	return nil, fmt.Errorf("dissem: a %s message is not relayed between regions", m.Type)
}

// splitHeader checks the header and returns the type and payload.
func splitHeader(b []byte) (Type, []byte, error) {
	if len(b) < 2 {
		return 0, nil, fmt.Errorf("%w: %d bytes", ErrBadMessage, len(b))
	}
	if b[0] != WireVersion {
		return 0, nil, fmt.Errorf("%w: wire version %d, want %d", ErrBadMessage, b[0], WireVersion)
	}
	t := Type(b[1])
	if t == 0 || t > MaxType {
		return 0, nil, fmt.Errorf("%w: unknown type %d", ErrBadMessage, b[1])
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
		fd.err = fmt.Errorf("%w: %w", ErrBadMessage, err)
	case l != n:
		fd.err = fmt.Errorf("%w: %d fields, want %d", ErrBadMessage, l, n)
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
		fd.err = fmt.Errorf("%w: %w", ErrBadMessage, err)
	case n < 0:
		return nil // nil
	case n > max:
		fd.err = fmt.Errorf("%w: field of %d bytes (max %d)", ErrBadMessage, n, max)
	case n > fd.r.Len():
		fd.err = fmt.Errorf("%w: field of %d bytes with %d left", ErrBadMessage, n, fd.r.Len())
	default:
		b := make([]byte, n)
		if _, err := io.ReadFull(fd.r, b); err != nil {
			fd.err = fmt.Errorf("%w: %w", ErrBadMessage, err)
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
		fd.err = fmt.Errorf("%w: %w", ErrBadMessage, err)
	}
	return v
}

func (fd *fieldDecoder) int() int {
	if fd.err != nil {
		return 0
	}
	v, err := fd.dec.DecodeInt()
	if err != nil {
		fd.err = fmt.Errorf("%w: %w", ErrBadMessage, err)
	}
	return v
}

func (fd *fieldDecoder) bytes(max int) []byte { return fd.raw(max) }

func (fd *fieldDecoder) done() error {
	if fd.err != nil {
		return fd.err
	}
	if _, err := fd.dec.PeekCode(); err == nil {
		return fmt.Errorf("%w: trailing bytes", ErrBadMessage)
	}
	return nil
}

func decodeAlive(b []byte) (Alive, error) {
	fd := newFieldDecoder(b, 5)
	a := Alive{Origin: crdt.Origin{Node: fd.str(crdt.MaxNameLen), Incarnation: fd.u64()},
		Watermark: fd.u64(), Sessions: fd.int(), ClientAddr: fd.str(crdt.MaxNameLen)}
	if err := fd.done(); err != nil {
		return Alive{}, err
	}
	if a.Origin.Node == "" || a.Sessions < 0 {
		return Alive{}, fmt.Errorf("%w: alive without a node", ErrBadMessage)
	}
	return a, nil
}

func decodeDigestMsg(b []byte) (DigestMsg, error) {
	fd := newFieldDecoder(b, 2)
	m := DigestMsg{From: fd.str(crdt.MaxNameLen)}
	raw := fd.bytes(MaxStreamMessage)
	if err := fd.done(); err != nil {
		return DigestMsg{}, err
	}
	if m.From == "" {
		return DigestMsg{}, fmt.Errorf("%w: digest without a sender", ErrBadMessage)
	}
	d, err := crdt.DecodeDigest(raw)
	if err != nil {
		return DigestMsg{}, fmt.Errorf("%w: %w", ErrBadMessage, err)
	}
	m.Digest = d
	return m, nil
}

// cursorPassShift places a cursor's pass in the top two bits of its
// after on the wire: versions never come near 2^62.
const cursorPassShift = 62

// cursorAfter is a cursor's after on the wire, with its pass.
func cursorAfter(c crdt.PageCursor) uint64 {
	return c.After | uint64(c.Pass)<<cursorPassShift
}

// cursor reads a page cursor [node, inc, after]; an empty node with no
// pass is the zero cursor (a transfer's start).
func (fd *fieldDecoder) cursor() crdt.PageCursor {
	c := crdt.PageCursor{Origin: crdt.Origin{Node: fd.str(crdt.MaxNameLen), Incarnation: fd.u64()}, After: fd.u64()}
	pass := c.After >> cursorPassShift
	c.After &^= 3 << cursorPassShift
	switch {
	case pass > uint64(crdt.MaxPagePass):
		if fd.err == nil {
			fd.err = fmt.Errorf("%w: page cursor of pass %d", ErrBadMessage, pass)
		}
		return crdt.PageCursor{}
	case c.Origin.Node == "" && pass == 0:
		return crdt.PageCursor{}
	}
	c.Pass, c.Started = crdt.PagePass(pass), true
	return c
}

func decodeSyncPage(b []byte) (SyncPage, crdt.Sync, error) {
	fd := newFieldDecoder(b, 9)
	p := SyncPage{From: fd.str(crdt.MaxNameLen)}
	last := fd.u64()
	p.At, p.Next = fd.cursor(), fd.cursor()
	raw := fd.bytes(MaxStreamMessage)
	if err := fd.done(); err != nil {
		return SyncPage{}, nil, err
	}
	switch {
	case p.From == "":
		return SyncPage{}, nil, fmt.Errorf("%w: sync page without a sender", ErrBadMessage)
	case last > 1:
		return SyncPage{}, nil, fmt.Errorf("%w: sync page last flag %d", ErrBadMessage, last)
	}
	p.Last = last == 1
	if !p.Last && !p.Next.Started {
		return SyncPage{}, nil, fmt.Errorf("%w: sync page that is not the last without a next cursor", ErrBadMessage)
	}
	s, err := crdt.DecodeSync(raw)
	if err != nil {
		return SyncPage{}, nil, fmt.Errorf("%w: %w", ErrBadMessage, err)
	}
	return p, s, nil
}

func decodePullPage(b []byte) (DigestMsg, error) {
	fd := newFieldDecoder(b, 5)
	m := DigestMsg{From: fd.str(crdt.MaxNameLen)}
	raw := fd.bytes(MaxStreamMessage)
	m.Cursor = fd.cursor()
	if err := fd.done(); err != nil {
		return DigestMsg{}, err
	}
	if m.From == "" || !m.Cursor.Started {
		return DigestMsg{}, fmt.Errorf("%w: page pull without a sender or a cursor", ErrBadMessage)
	}
	d, err := crdt.DecodeDigest(raw)
	if err != nil {
		return DigestMsg{}, fmt.Errorf("%w: %w", ErrBadMessage, err)
	}
	m.Digest = d
	return m, nil
}

func decodeRouteReq(b []byte) (RouteReq, error) {
	fd := newFieldDecoder(b, 6)
	r := RouteReq{ID: fd.u64(), FromNode: fd.str(crdt.MaxNameLen), To: fd.str(crdt.MaxNameLen),
		From: fd.str(crdt.MaxNameLen), FromDevice: fd.str(crdt.MaxNameLen), Body: fd.bytes(MaxBodyBytes)}
	if err := fd.done(); err != nil {
		return RouteReq{}, err
	}
	if r.FromNode == "" || r.To == "" {
		return RouteReq{}, fmt.Errorf("%w: route without sender or recipient", ErrBadMessage)
	}
	return r, nil
}

func decodeRouteVia(b []byte) (RouteVia, error) {
	fd := newFieldDecoder(b, 7)
	r := RouteVia{RouteReq: RouteReq{ID: fd.u64(), FromNode: fd.str(crdt.MaxNameLen)}, Gateway: fd.str(crdt.MaxNameLen)}
	r.To, r.From, r.FromDevice, r.Body = fd.str(crdt.MaxNameLen), fd.str(crdt.MaxNameLen), fd.str(crdt.MaxNameLen), fd.bytes(MaxBodyBytes)
	if err := fd.done(); err != nil {
		return RouteVia{}, err
	}
	if r.FromNode == "" || r.To == "" || r.Gateway == "" {
		return RouteVia{}, fmt.Errorf("%w: routed message without sender, gateway or recipient", ErrBadMessage)
	}
	return r, nil
}

func decodeKickVia(b []byte) (KickVia, error) {
	fd := newFieldDecoder(b, 5)
	k := KickVia{KickReq: KickReq{ID: fd.u64(), FromNode: fd.str(crdt.MaxNameLen)}, Gateway: fd.str(crdt.MaxNameLen)}
	k.User, k.Device = fd.str(crdt.MaxNameLen), fd.str(crdt.MaxNameLen)
	if err := fd.done(); err != nil {
		return KickVia{}, err
	}
	if k.FromNode == "" || k.User == "" || k.Gateway == "" {
		return KickVia{}, fmt.Errorf("%w: kick without sender, gateway or user", ErrBadMessage)
	}
	return k, nil
}

// decodeRegion reads a region message: its header, and the raw payload
// (deltas or sync) or the announced nodes.
func decodeRegion(t Type, b []byte) (RegionMsg, []byte, error) {
	fd := newFieldDecoder(b, 4)
	h := RegionMsg{Region: fd.str(crdt.MaxNameLen), From: fd.str(crdt.MaxNameLen), Via: fd.str(crdt.MaxNameLen)}
	var raw []byte
	switch t {
	case TypeRegionAlive:
		if fd.err == nil {
			h.Nodes, fd.err = decodeRegionNodes(fd)
		}
	case TypeBridgeWAN:
		if fd.err == nil {
			h.Reach, fd.err = decodeReach(fd)
		}
	default:
		raw = fd.bytes(MaxStreamMessage)
	}
	if err := fd.done(); err != nil {
		return RegionMsg{}, nil, err
	}
	if h.Region == "" || h.From == "" {
		return RegionMsg{}, nil, fmt.Errorf("%w: region message without a region or a sender", ErrBadMessage)
	}
	return h, raw, nil
}

func decodeReach(fd *fieldDecoder) ([]string, error) {
	n, err := fd.dec.DecodeArrayLen()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadMessage, err)
	}
	// Each entry takes at least 2 bytes (a region is not empty).
	if n < 0 || n > MaxReachRegions || n*2 > fd.r.Len() {
		return nil, fmt.Errorf("%w: %d regions", ErrBadMessage, n)
	}
	out := make([]string, 0, n)
	for range n {
		reg := fd.str(crdt.MaxNameLen)
		if fd.err != nil {
			return nil, fd.err
		}
		if reg == "" {
			return nil, fmt.Errorf("%w: an empty region", ErrBadMessage)
		}
		out = append(out, reg)
	}
	return out, nil
}

func decodeRegionNodes(fd *fieldDecoder) ([]RegionNode, error) {
	n, err := fd.dec.DecodeArrayLen()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadMessage, err)
	}
	// Each entry takes at least 5 bytes: n is checked against the input
	// left before anything is allocated.
	if n < 0 || n > MaxRegionNodes || n*5 > fd.r.Len() {
		return nil, fmt.Errorf("%w: %d region nodes", ErrBadMessage, n)
	}
	out := make([]RegionNode, 0, n)
	for range n {
		l, err := fd.dec.DecodeArrayLen()
		if err != nil || l != 4 {
			return nil, fmt.Errorf("%w: region node of %d fields (%v)", ErrBadMessage, l, err)
		}
		rn := RegionNode{Node: fd.str(crdt.MaxNameLen), Incarnation: fd.u64(), Watermark: fd.u64(), ClientAddr: fd.str(crdt.MaxNameLen)}
		if fd.err != nil {
			return nil, fd.err
		}
		if rn.Node == "" {
			return nil, fmt.Errorf("%w: region node without a name", ErrBadMessage)
		}
		out = append(out, rn)
	}
	return out, nil
}

func decodeRouteAck(b []byte) (RouteAck, error) {
	fd := newFieldDecoder(b, 3)
	r := RouteAck{ID: fd.u64(), Delivered: fd.int(), Err: fd.str(1024)}
	if err := fd.done(); err != nil {
		return RouteAck{}, err
	}
	if r.Delivered < 0 {
		return RouteAck{}, fmt.Errorf("%w: negative delivery count", ErrBadMessage)
	}
	return r, nil
}

func decodeKickReq(b []byte) (KickReq, error) {
	fd := newFieldDecoder(b, 4)
	k := KickReq{ID: fd.u64(), FromNode: fd.str(crdt.MaxNameLen), User: fd.str(crdt.MaxNameLen), Device: fd.str(crdt.MaxNameLen)}
	if err := fd.done(); err != nil {
		return KickReq{}, err
	}
	if k.FromNode == "" || k.User == "" {
		return KickReq{}, fmt.Errorf("%w: kick without sender or user", ErrBadMessage)
	}
	return k, nil
}

func DecodeKeyOp(b []byte) (KeyOp, error) {
	fd := newFieldDecoder(b, 4)
	k := KeyOp{Op: fd.str(16), Key: fd.bytes(64), ID: fd.u64(), FromNode: fd.str(crdt.MaxNameLen)}
	if err := fd.done(); err != nil {
		return KeyOp{}, err
	}
	switch k.Op {
	case "install", "use", "remove":
	default:
		return KeyOp{}, fmt.Errorf("%w: unknown key op %q", ErrBadMessage, k.Op)
	}
	if n := len(k.Key); n != 16 && n != 24 && n != 32 {
		return KeyOp{}, fmt.Errorf("%w: key of %d bytes", ErrBadMessage, n)
	}
	return k, nil
}

// Message is one gossip message: its decoded form (Type says which field
// is set) and Bytes, its encoding, exactly what goes on the wire. Every
// size the cluster and the simulator count is len(Bytes). A Message is
// immutable once made: the simulator hands one to every receiver, and a
// node relays a received one as it came.
type Message struct {
	Type    Type
	Deltas  []crdt.Delta
	Alive   Alive // TypeAlive, TypeLeaving and TypeListed
	Digest  DigestMsg
	Sync    crdt.Sync // TypeSync and TypeSyncPage
	Page    SyncPage  // TypeSyncPage
	Route   RouteReq
	Ack     RouteAck
	Kick    KickReq
	Key     KeyOp
	Via     RouteVia  // TypeRouteVia
	KickVia KickVia   // TypeKickVia
	Region  RegionMsg // TypeRegionDeltas, TypeRegionAlive, TypeRegionSync, TypeBridgeWAN
	Bytes   []byte

	// What a Node works out of a delta batch once, for every node that
	// steps it (the simulator hands one Message to all its receivers):
	// whether the deltas are valid, and their origins' numbers in table.
	checked bool
	invalid error
	table   *OriginTable
	origins []int32
	// An announcement's node name and client address numbered in
	// aliveTable.
	aliveTable           *OriginTable
	aliveName, aliveAddr int32
}

// aliveNumbers returns the numbers in t of an announcement's node name
// and client address, once per message and table.
func (m *Message) aliveNumbers(t *OriginTable) (name, addr int32) {
	if m.aliveTable != t {
		m.aliveTable = t
		m.aliveName = t.names.number(m.Alive.Origin.Node)
		m.aliveAddr = t.addrs.number(m.Alive.ClientAddr)
	}
	return m.aliveName, m.aliveAddr
}

// check validates a delta batch's deltas, once per message.
func (m *Message) check() error {
	if !m.checked {
		m.checked = true
		for i := range m.Deltas {
			if err := m.Deltas[i].Validate(); err != nil {
				m.invalid = err
				break
			}
		}
	}
	return m.invalid
}

// originNumbers returns the numbers of a delta batch's origins in t, once
// per message and table.
func (m *Message) originNumbers(t *OriginTable) []int32 {
	if m.table != t {
		m.table = t
		m.origins = make([]int32, len(m.Deltas))
		for i := range m.Deltas {
			m.origins[i] = t.number(m.Deltas[i].Origin())
		}
	}
	return m.origins
}

// Size is the message's encoded size in bytes.
func (m *Message) Size() int { return len(m.Bytes) }

// Decode decodes any gossip message; the Message keeps b as its Bytes. It
// never panics; garbage is an error wrapping ErrBadMessage.
func Decode(b []byte) (*Message, error) {
	t, payload, err := splitHeader(b)
	if err != nil {
		return nil, err
	}
	m := &Message{Type: t, Bytes: b}
	switch t {
	case TypeDeltas:
		m.Deltas, err = crdt.DecodeDeltas(payload)
	case TypeAlive, TypeLeaving, TypeListed:
		m.Alive, err = decodeAlive(payload)
	case TypePull, TypeState:
		m.Digest, err = decodeDigestMsg(payload)
	case TypeSync:
		m.Sync, err = crdt.DecodeSync(payload)
	case TypeSyncPage:
		m.Page, m.Sync, err = decodeSyncPage(payload)
	case TypePullPage:
		m.Digest, err = decodePullPage(payload)
	case TypeRoute:
		m.Route, err = decodeRouteReq(payload)
	case TypeRouteAck:
		m.Ack, err = decodeRouteAck(payload)
	case TypeKey:
		m.Key, err = DecodeKeyOp(payload)
	case TypeKick:
		m.Kick, err = decodeKickReq(payload)
	case TypeRouteVia:
		m.Via, err = decodeRouteVia(payload)
	case TypeKickVia:
		m.KickVia, err = decodeKickVia(payload)
	case TypeRegionDeltas, TypeRegionAlive, TypeRegionSync, TypeBridgeWAN:
		var raw []byte
		m.Region, raw, err = decodeRegion(t, payload)
		switch {
		case err != nil:
		case t == TypeRegionDeltas:
			if m.Deltas, err = crdt.DecodeDeltas(raw); err != nil {
				err = fmt.Errorf("%w: %w", ErrBadMessage, err)
			}
		case t == TypeRegionSync:
			if m.Sync, err = crdt.DecodeSync(raw); err != nil {
				err = fmt.Errorf("%w: %w", ErrBadMessage, err)
			}
		}
	}
	if err != nil {
		if !errors.Is(err, ErrBadMessage) {
			err = fmt.Errorf("%w: %s: %w", ErrBadMessage, t, err)
		}
		return nil, err
	}
	return m, nil
}

// TypeOf returns the type of an encoded message, or 0 when its header is
// not one of ours.
func TypeOf(b []byte) Type {
	if len(b) < 2 || b[0] != WireVersion || b[1] == 0 || Type(b[1]) > MaxType {
		return 0
	}
	return Type(b[1])
}

// NewDeltas builds a batch of an owner's deltas.
func NewDeltas(ds []crdt.Delta) (*Message, error) {
	b, err := EncodeDeltas(ds)
	if err != nil {
		return nil, err
	}
	return &Message{Type: TypeDeltas, Deltas: ds, Bytes: b}, nil
}

// NewAlive builds an alive announcement (t TypeAlive), a leave intent
// (TypeLeaving) or the announcement to a member just listed (TypeListed).
func NewAlive(t Type, a Alive) (*Message, error) {
	b, err := EncodeAliveAs(t, a)
	if err != nil {
		return nil, err
	}
	return &Message{Type: t, Alive: a, Bytes: b}, nil
}

// NewDigest builds a pull request (t TypePull) or push/pull state
// (TypeState) carrying from's digest.
func NewDigest(t Type, from string, d crdt.Digest) (*Message, error) {
	dm := DigestMsg{From: from, Digest: d}
	b, err := EncodeDigest(t, dm)
	if err != nil {
		return nil, err
	}
	return &Message{Type: t, Digest: dm, Bytes: b}, nil
}

// NewSync builds the answer to a digest, or its last page.
func NewSync(s crdt.Sync) (*Message, error) {
	b, err := EncodeSync(s)
	if err != nil {
		return nil, err
	}
	return &Message{Type: TypeSync, Sync: s, Bytes: b}, nil
}

// NewSyncPage builds a page of a paged answer to a digest.
func NewSyncPage(p SyncPage, s crdt.Sync) (*Message, error) {
	b, err := EncodeSyncPage(p, s)
	if err != nil {
		return nil, err
	}
	return &Message{Type: TypeSyncPage, Page: p, Sync: s, Bytes: b}, nil
}

// NewPullPage builds a request, from from with digest d, for the page of
// an answer at cursor.
func NewPullPage(from string, d crdt.Digest, cursor crdt.PageCursor) (*Message, error) {
	dm := DigestMsg{From: from, Digest: d, Cursor: cursor}
	b, err := EncodePullPage(dm)
	if err != nil {
		return nil, err
	}
	return &Message{Type: TypePullPage, Digest: dm, Bytes: b}, nil
}

// Meta is the node metadata memberlist carries for a gateway:
// [incarnation, client_addr], and [incarnation, client_addr, 1] for a
// bridge-capable gateway (a member of its region's WAN pool too), so a
// single-region cluster's metadata is as it always was.
type Meta struct {
	Incarnation uint64
	ClientAddr  string
	Bridge      bool
}

// EncodeMeta encodes node metadata.
func EncodeMeta(m Meta) []byte {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	if m.Bridge {
		_ = enc.EncodeArrayLen(3)
	} else {
		_ = enc.EncodeArrayLen(2)
	}
	_ = enc.EncodeUint(m.Incarnation)
	_ = enc.EncodeString(m.ClientAddr)
	if m.Bridge {
		_ = enc.EncodeUint(1)
	}
	return buf.Bytes()
}

// DecodeMeta decodes node metadata; garbage is an error wrapping
// ErrBadMessage.
func DecodeMeta(b []byte) (Meta, error) {
	fields := 2
	if len(b) > 0 && b[0] == 0x93 { // a fixarray of 3
		fields = 3
	}
	fd := newFieldDecoder(b, fields)
	m := Meta{Incarnation: fd.u64(), ClientAddr: fd.str(512)}
	if fields == 3 {
		if flag := fd.u64(); flag != 1 && fd.err == nil {
			fd.err = fmt.Errorf("%w: bridge flag %d", ErrBadMessage, flag)
		}
		m.Bridge = true
	}
	if err := fd.done(); err != nil {
		return Meta{}, err
	}
	return m, nil
}

// WANMeta is the node metadata a bridge-capable gateway carries in the WAN
// pool: [region, incarnation].
type WANMeta struct {
	Region      string
	Incarnation uint64
}

// EncodeWANMeta encodes WAN pool metadata.
func EncodeWANMeta(m WANMeta) []byte {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	_ = enc.EncodeArrayLen(2)
	_ = enc.EncodeString(m.Region)
	_ = enc.EncodeUint(m.Incarnation)
	return buf.Bytes()
}

// DecodeWANMeta decodes WAN pool metadata.
func DecodeWANMeta(b []byte) (WANMeta, error) {
	fd := newFieldDecoder(b, 2)
	m := WANMeta{Region: fd.str(crdt.MaxNameLen), Incarnation: fd.u64()}
	if err := fd.done(); err != nil {
		return WANMeta{}, err
	}
	if m.Region == "" {
		return WANMeta{}, fmt.Errorf("%w: WAN member without a region", ErrBadMessage)
	}
	return m, nil
}
