package gossip

// Counters, and memberlist's log adapted to zap.

import (
	"io"
	"strings"
	"sync/atomic"

	"go.uber.org/zap"
)

// Stats returns the cluster's counters.
func (c *Cluster) Stats() *Stats { return &c.stats }

// Stats counts what the cluster sent, received and dropped.
type Stats struct {
	PacketsSent         atomic.Uint64
	StreamsSent         atomic.Uint64
	BytesSent           atomic.Uint64
	SendErrors          atomic.Uint64
	DeltaCopies         atomic.Uint64 // delta copies sent directly (not counting piggyback retransmits)
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
}

// zapWriter adapts memberlist's *log.Logger output to zap at debug level,
// except warnings and errors.
type zapWriter struct{ log *zap.Logger }

func (w *zapWriter) Write(p []byte) (int, error) {
	s := strings.TrimSpace(string(p))
	switch {
	case strings.Contains(s, "use of closed network connection"):
		w.log.Debug(s) // sockets closing under a send during shutdown
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
