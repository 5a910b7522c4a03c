package sim

import "github.com/rollcall/rollcall/dissem"

// Encoded sizes of memberlist's own messages, which the simulator does not
// build for real. Rollcall's messages are the protocol core's own encodings
// (dissem), so their sizes are len() of the real bytes; memberlist's are
// msgpack maps with field names (hashicorp/go-msgpack), sized here field by
// field from the structs in memberlist's net.go, with the node metadata
// they carry encoded by dissem.EncodeMeta. memberlist's LZW compression of
// packets is not modelled: sizes are uncompressed, an upper bound.

func mpStr(n int) int {
	switch {
	case n < 32:
		return 1 + n
	case n < 1<<8:
		return 2 + n
	case n < 1<<16:
		return 3 + n
	}
	return 5 + n
}

func mpBin(n int) int {
	switch {
	case n < 1<<8:
		return 2 + n
	case n < 1<<16:
		return 3 + n
	}
	return 5 + n
}

// field is a msgpack map entry: the key's string plus the value.
func field(name string, value int) int { return mpStr(len(name)) + value }

// Sizes of the packet framing memberlist adds.
const (
	crcOverhead      = 5  // hasCrcMsg + CRC32, protocol version 5 peers
	compoundHeader   = 2  // compoundMsg type + part count
	compoundPerPart  = 2  // uint16 length per part
	userMsgFrame     = 1  // userMsg type byte
	streamOverhead   = 12 // stream framing of a user message (type, msgpack header with length)
	ipv4Addr         = 4
	ackPayloadLength = 0
)

// mlSizes holds memberlist message sizes for one cluster (names of one
// length).
type mlSizes struct {
	ping, ack, nack, indirect, suspect, alive, dead int
	pushNode                                        int // one node in a push/pull state
	pushHeader                                      int
	meta                                            int
}

func newMLSizes(nameLen int, clientAddr string) mlSizes {
	name := mpStr(nameLen)
	seq := 5
	inc := 5
	meta := len(dissem.EncodeMeta(dissem.Meta{Incarnation: incarnation(1), ClientAddr: clientAddr}))
	var s mlSizes
	s.meta = meta
	s.ping = 1 + 1 + field("SeqNo", seq) + field("Node", name) + field("SourceAddr", mpBin(ipv4Addr)) +
		field("SourcePort", 3) + field("SourceNode", name)
	s.ack = 1 + 1 + field("SeqNo", seq) + field("Payload", mpBin(ackPayloadLength))
	s.nack = 1 + 1 + field("SeqNo", seq)
	s.indirect = 1 + 1 + field("SeqNo", seq) + field("Target", mpBin(ipv4Addr)) + field("Port", 3) +
		field("Node", name) + field("Nack", 1) + field("SourceAddr", mpBin(ipv4Addr)) + field("SourcePort", 3) +
		field("SourceNode", name)
	s.suspect = 1 + 1 + field("Incarnation", inc) + field("Node", name) + field("From", name)
	s.dead = s.suspect
	s.alive = 1 + 1 + field("Incarnation", inc) + field("Node", name) + field("Addr", mpBin(ipv4Addr)) +
		field("Port", 3) + field("Meta", mpBin(meta)) + field("Vsn", 1+6)
	s.pushNode = 1 + field("Name", name) + field("Addr", mpBin(ipv4Addr)) + field("Port", 3) +
		field("Meta", mpBin(meta)) + field("Incarnation", inc) + field("State", 1) + field("Vsn", 1+6)
	s.pushHeader = 1 + 1 + field("Nodes", 5) + field("UserStateLen", 5) + field("Join", 1)
	return s
}
