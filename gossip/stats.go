package gossip

// Counters, and memberlist's log adapted to zap.

import (
	"io"
	"strconv"
	"strings"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/rollcall/rollcall/dissem"
)

// IncomingTransfers returns the number of paged anti-entropy answers this
// node is receiving.
func (c *Cluster) IncomingTransfers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.core.Transfers()
}

// Stats returns the cluster's counters.
func (c *Cluster) Stats() *Stats { return &c.stats }

// Stats counts what the cluster sent, received and dropped.
type Stats struct {
	PacketsSent         atomic.Uint64
	StreamsSent         atomic.Uint64
	BytesSent           atomic.Uint64
	SendErrors          atomic.Uint64
	DeltaCopies         atomic.Uint64 // delta copies sent point to point: owners' sends and seeds, tree relays (not piggyback retransmits)
	DeltaBytes          atomic.Uint64 // bytes of delta messages sent directly
	AliveBytes          atomic.Uint64 // bytes of alive announcements sent directly
	StateBytes          atomic.Uint64 // bytes of push/pull digests handed to memberlist
	PullBytes           atomic.Uint64 // bytes of pull requests sent
	MessagesReceived    atomic.Uint64
	BytesReceived       atomic.Uint64
	DeltasReceived      atomic.Uint64
	BadMessages         atomic.Uint64 // garbage or invalid messages, dropped
	InboundDropped      atomic.Uint64 // dropped because the inbound queue was full
	QueuePruned         atomic.Uint64
	GapPulls            atomic.Uint64
	AnswersDropped      atomic.Uint64 // anti-entropy requests dropped: too many at once
	SyncRecordsSent     atomic.Uint64
	SyncBytesSent       atomic.Uint64
	SyncRecordsReceived atomic.Uint64
	SyncPagesSent       atomic.Uint64 // pages of paged anti-entropy answers sent
	SyncPagesReceived   atomic.Uint64
	TransfersStarted    atomic.Uint64 // paged answers this node began receiving
	TransfersDone       atomic.Uint64 // ... received to their last page
	TransfersAbandoned  atomic.Uint64 // ... left to anti-entropy after repeated stalls

	WANDeltaCopies      atomic.Uint64 // deltas sent over the WAN pool, once per receiving bridge
	WANMessagesSent     atomic.Uint64
	WANBytesSent        atomic.Uint64
	WANMessagesReceived atomic.Uint64
	RegionPulls         atomic.Uint64 // pulls of what a region's announcement showed this replica lacked
	RegionsExpired      atomic.Uint64 // regions not heard within the WAN lease: their sessions were shown expired
	BridgeChanges       atomic.Uint64 // times this gateway became, or ceased to be, its region's active bridge

	LeasesExpired atomic.Uint64 // peers whose lease passed: their sessions were shown expired
	MembersFailed atomic.Uint64 // members memberlist declared dead, whose sessions were then shown expired
	MembersLeft   atomic.Uint64 // members that left gracefully, whose sessions were then shown expired

	// Messages and bytes by message type (index 0: not a Rollcall
	// message) and, when sent, by transport; see Sent and Received.
	sent     [dissem.MaxType + 1][numTransports]traffic
	received [dissem.MaxType + 1]traffic
	// peer values refused as out of bounds, by reason (Refusals)
	refused [numRefusals]atomic.Uint64
	// refusalLog rate-limits the logging of refusals
	refusalLog refusalLog
}

type traffic struct{ messages, bytes atomic.Uint64 }

func (t *traffic) add(n int) {
	t.messages.Add(1)
	t.bytes.Add(uint64(n))
}

// transport is how a message left this node.
type transport uint8

const (
	transportPacket    transport = iota // a best-effort UDP packet (memberlist SendBestEffort)
	transportStream                     // a reliable TCP stream (memberlist SendReliable)
	transportBroadcast                  // piggybacked on memberlist's gossip (one count per retransmit)
	transportPushPull                   // memberlist's push/pull state exchange
	numTransports
)

func (t transport) String() string {
	switch t {
	case transportPacket:
		return "packet"
	case transportStream:
		return "stream"
	case transportBroadcast:
		return "broadcast"
	case transportPushPull:
		return "pushpull"
	}
	return "transport(" + strconv.Itoa(int(t)) + ")"
}

func (s *Stats) countSent(msg []byte, t transport) { s.sent[dissem.TypeOf(msg)][t].add(len(msg)) }
func (s *Stats) countReceived(msg []byte)          { s.received[dissem.TypeOf(msg)].add(len(msg)) }

// Traffic is the messages and bytes of one message type, sent over one
// transport or received.
type Traffic struct {
	Type      string // the wire message type (dissem.Type's name); "invalid" for anything else
	Transport string // packet, stream, broadcast or pushpull; empty when received
	Messages  uint64
	Bytes     uint64
}

func typeName(t dissem.Type) string {
	if t == 0 {
		return "invalid"
	}
	return t.String()
}

// Sent returns what this node sent, by message type and transport: every
// combination, zeros included.
func (s *Stats) Sent() []Traffic {
	out := make([]Traffic, 0, len(s.sent)*int(numTransports))
	for typ := range s.sent {
		for tr := range numTransports {
			t := &s.sent[typ][tr]
			out = append(out, Traffic{Type: typeName(dissem.Type(typ)), Transport: tr.String(),
				Messages: t.messages.Load(), Bytes: t.bytes.Load()})
		}
	}
	return out
}

// Received returns what this node received, by message type (packets and
// streams alike, and the push/pull state peers sent), zeros included.
func (s *Stats) Received() []Traffic {
	out := make([]Traffic, 0, len(s.received))
	for typ := range s.received {
		t := &s.received[typ]
		out = append(out, Traffic{Type: typeName(dissem.Type(typ)), Messages: t.messages.Load(), Bytes: t.bytes.Load()})
	}
	return out
}

// zapWriter adapts memberlist's *log.Logger output to zap at debug level,
// except warnings and errors.
type zapWriter struct{ log *zap.Logger }

func (w *zapWriter) Write(p []byte) (int, error) {
	s := strings.TrimSpace(string(p))
	switch {
	case strings.Contains(s, "use of closed network connection"):
		w.log.Debug(s) // sockets closing under a send during shutdown
	case strings.Contains(s, "ignoring alive message") && strings.Contains(s, outOfBounds):
		w.log.Debug(s) // the alive filter's refusal, which it logs rate-limited itself
	case strings.Contains(s, probeRefusal):
		w.log.Debug(s) // a starting gateway's Probe, refused as it should be
	case strings.Contains(s, "[ERR]"):
		w.log.Error(s)
	case strings.Contains(s, "[WARN]"):
		w.log.Warn(s)
	default:
		w.log.Debug(s)
	}
	return len(p), nil
}

var _ io.Writer = (*zapWriter)(nil)
