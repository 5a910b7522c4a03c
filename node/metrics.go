package node

import (
	"sync/atomic"
	"time"

	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/protocol"
)

// What the node counts for exporters (package metrics serves it as
// Prometheus metrics on GET /metrics). Every count is an atomic bumped
// where the event happens and read at scrape time; gauges are computed at
// scrape time. Labels come from closed sets (ops, error codes, reasons),
// never from names a client chose.

// Request ops, the label values of the request counters. opUnknown counts
// lines that named no known op (or could not be decoded far enough).
const (
	opUnknown = iota
	opHello
	opHB
	opStatus
	opAccount
	opJoin
	opLeave
	opGet
	opGroup
	opLocate
	opSub
	opUnsub
	opSend
	opBye
	opRefresh
	opMeta
	opTrack
	opUntrack
	numOps
)

// opIndex returns the counter index of a request op.
func opIndex(op string) int32 {
	switch op {
	case protocol.OpHello:
		return opHello
	case protocol.OpHB:
		return opHB
	case protocol.OpStatus:
		return opStatus
	case protocol.OpAccount:
		return opAccount
	case protocol.OpJoin:
		return opJoin
	case protocol.OpLeave:
		return opLeave
	case protocol.OpGet:
		return opGet
	case protocol.OpGroup:
		return opGroup
	case protocol.OpLocate:
		return opLocate
	case protocol.OpSub:
		return opSub
	case protocol.OpUnsub:
		return opUnsub
	case protocol.OpSend:
		return opSend
	case protocol.OpBye:
		return opBye
	case protocol.OpRefresh:
		return opRefresh
	case protocol.OpMeta:
		return opMeta
	case protocol.OpTrack:
		return opTrack
	case protocol.OpUntrack:
		return opUntrack
	}
	return opUnknown
}

// opNames returns the label value of each op index.
func opNames() [numOps]string {
	return [numOps]string{"unknown", protocol.OpHello, protocol.OpHB, protocol.OpStatus, protocol.OpAccount, protocol.OpJoin, protocol.OpLeave,
		protocol.OpGet, protocol.OpGroup, protocol.OpLocate, protocol.OpSub, protocol.OpUnsub, protocol.OpSend, protocol.OpBye, protocol.OpRefresh,
		protocol.OpMeta, protocol.OpTrack, protocol.OpUntrack}
}

// errorCodes returns every error code, in the order of the error
// counters; a code missing here is counted as "other" (codeOther).
// TestMetricsKnowEveryCode checks that protocol/protocol.go's codes are
// all here.
func errorCodes() [numCodes]protocol.ErrorCode {
	return [numCodes]protocol.ErrorCode{protocol.CodeBadJSON, protocol.CodeLineTooLong, protocol.CodeUnknownOp, protocol.CodeBadRequest, protocol.CodeAuthFailed,
		protocol.CodeHandshakeTimeout, protocol.CodeNotAuthenticated, protocol.CodeSuperseded, protocol.CodeShuttingDown, protocol.CodeSlowConsumer,
		protocol.CodeExpired, protocol.CodeInternal, protocol.CodeOverloaded, protocol.CodeEpochExhausted, protocol.CodeRateLimited,
		protocol.CodeTooManySessions, protocol.CodeTooManyConnections, protocol.CodeForbidden, protocol.CodeTokenExpired, protocol.CodeUnsupportedProtocol,
		protocol.CodeKicked}
}

// numCodes is the number of error codes counted apart; codeOther counts
// the rest.
const (
	numCodes  = 21
	codeOther = numCodes
)

// codeIndex returns the counter index of an error code. It scans a short
// list: errors are not a hot path.
func codeIndex(code protocol.ErrorCode) int {
	for i, c := range errorCodes() {
		if c == code {
			return i
		}
	}
	return codeOther
}

// codeName returns the label value of a code index.
func codeName(i int) string {
	if codes := errorCodes(); i < len(codes) {
		return string(codes[i])
	}
	return "other"
}

// Disconnect reasons beyond the closing error codes: the index space of
// the disconnect counters is the error codes' (codeIndex), plus these.
const (
	reasonBye    = codeOther + 1 // the client sent bye
	reasonClosed = codeOther + 2 // the client closed the connection, or the network did
	numReasons   = codeOther + 3
)

// reasonName returns the label value of a disconnect reason index.
func reasonName(i int) string {
	switch i {
	case reasonBye:
		return "bye"
	case reasonClosed:
		return "closed"
	}
	return codeName(i)
}

// metricCounters are the node's labelled counters (counters.m).
type metricCounters struct {
	requests    [numOps]atomic.Uint64                // request lines handled (heartbeats: counters.heartbeats)
	errors      [numOps][codeOther + 1]atomic.Uint64 // error replies, by the request's op and the code
	disconnects [numReasons]atomic.Uint64            // sessions ended disconnected, by reason

	eventsDropped atomic.Uint64 // event frames not queued: the connection was closing or overflowed

	deltasApplied atomic.Uint64 // remote deltas merged (ApplyDeltas)
	deltasStale   atomic.Uint64 // remote deltas that held nothing new
	deltasInvalid atomic.Uint64 // remote deltas refused as invalid

	lag lagHistogram // remote deltas' write-to-merge time
}

// requestFailed counts an error reply to a request of op index op.
func (m *metricCounters) requestFailed(op int32, code protocol.ErrorCode) {
	if op < 0 || op >= numOps {
		op = opUnknown
	}
	m.errors[op][codeIndex(code)].Add(1)
}

// disconnected counts k sessions ended disconnected for reason (an index
// from codeIndex, or reasonBye or reasonClosed).
func (m *metricCounters) disconnected(reason, k int) {
	m.disconnects[reason].Add(uint64(k))
}

// lagBuckets returns the upper bounds, in seconds, of the propagation lag
// histogram's buckets: from a millisecond (one eager hop on a LAN) to a
// minute (a write that waited for anti-entropy or a healed partition).
func lagBuckets() [numLagBuckets]float64 {
	return [numLagBuckets]float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
}

const numLagBuckets = 15

// lagHistogram is a fixed-bucket histogram of durations, lock-free.
type lagHistogram struct {
	counts   [numLagBuckets + 1]atomic.Uint64 // the last bucket is +Inf
	sumNanos atomic.Uint64
	negative atomic.Uint64 // observations below zero (clock skew), counted as zero
}

func (h *lagHistogram) observe(d time.Duration) {
	if d < 0 {
		h.negative.Add(1)
		d = 0
	}
	i, secs := 0, d.Seconds()
	for _, b := range lagBuckets() {
		if secs <= b {
			break
		}
		i++
	}
	h.counts[i].Add(1)
	h.sumNanos.Add(uint64(d))
}

// LagHistogram is a snapshot of a duration histogram.
type LagHistogram struct {
	// Bounds are the buckets' upper bounds in seconds, ascending.
	Bounds []float64
	// Counts are the observations per bucket, not cumulative: Counts[i]
	// fell in (Bounds[i-1], Bounds[i]]; the last, one more than Bounds,
	// counts those above every bound.
	Counts []uint64
	// Sum is the total of every observation.
	Sum time.Duration
	// Negative counts observations below zero (the sender's clock was
	// ahead of ours), included in the first bucket as zero.
	Negative uint64
}

// Count returns the number of observations.
func (h LagHistogram) Count() uint64 {
	var n uint64
	for _, c := range h.Counts {
		n += c
	}
	return n
}

func (h *lagHistogram) snapshot() LagHistogram {
	bounds := lagBuckets()
	s := LagHistogram{Bounds: bounds[:], Counts: make([]uint64, numLagBuckets+1)}
	for i := range h.counts {
		s.Counts[i] = h.counts[i].Load()
	}
	s.Sum = time.Duration(h.sumNanos.Load())
	s.Negative = h.negative.Load()
	return s
}

// Metrics is a snapshot of everything the node counts, for exporters. The
// counters only grow over the node's life; the gauges are as of the call.
type Metrics struct {
	Node string

	// Gauges.
	Connections   int  // open client connections
	LocalSessions int  // active sessions this node owns
	Draining      bool // Drain has begun
	// SessionsInGrace counts the local sessions held for the disconnect
	// grace (Config.DisconnectGrace): their client dropped the connection,
	// and they show online until a reconnect takes them over or the grace
	// ends. LocalSessions includes them.
	SessionsInGrace int
	// Subscribers counts the connections with at least one subscription;
	// UserSubscriptions and GroupSubscriptions the subscriptions they hold.
	Subscribers        int
	UserSubscriptions  int
	GroupSubscriptions int
	// EventStreams counts the open change streams (GET /v1/events).
	EventStreams int
	// HTTPConnections counts the open HTTP connections (the HTTP port and
	// the WebSocket listener; a WebSocket counts once upgraded as a client
	// connection instead).
	HTTPConnections int
	// MaxConnections is the connection cap the node enforces now
	// (Node.MaxConnections: MaxConnections, or less under the open-file
	// limit; negative: none), FileLimit the open-file limit it keeps its
	// connections under (0: none known).
	MaxConnections int
	FileLimit      int
	// Replica counts the replica's session records by owner and by the
	// state the projection shows (tombstones included), and its users,
	// accounts and origins.
	Replica crdt.Census

	// Connection counters.
	Accepted   uint64 // client connections accepted
	Overloaded uint64 // connections refused at MaxConnections
	// TooManyConnections counts connections refused at MaxConnectionsPerIP.
	TooManyConnections uint64
	SlowConsumers      uint64 // connections dropped for not reading
	// OutOfFiles counts the connections refused overloaded because accept
	// ran out of file descriptors (also counted in Overloaded).
	OutOfFiles uint64

	// HTTP connection counters: refused at MaxHTTPConnections, and at
	// MaxConnectionsPerIP.
	HTTPOverloaded         uint64
	HTTPTooManyConnections uint64

	// Change stream counters (GET /v1/events).
	EventStreamsOpened         uint64 // streams opened
	EventStreamEvents          uint64 // events written to streams, snapshots included
	EventStreamsSlow           uint64 // streams ended because their queue overflowed
	EventStreamsTokenExpired   uint64 // streams ended because their token expired
	EventStreamsKeyRemoved     uint64 // streams ended because no key verifies their token any more
	EventStreamsRefusedSubject uint64 // streams refused at MaxEventStreamsPerSubject
	EventStreamsRefusedIP      uint64 // streams refused at MaxEventStreamsPerIP

	// Session counters.
	SessionsOpened uint64            // successful hellos
	Disconnects    map[string]uint64 // sessions ended disconnected, by reason: "bye", "closed" or the closing error code
	Expired        uint64            // sessions ended by silence
	Superseded     uint64            // connections whose session a newer epoch took

	// Request counters, by op ("unknown" for lines naming no known op);
	// the "hb" op counts every heartbeat, plain or with an id.
	Requests      map[string]uint64
	RequestErrors map[OpCode]uint64 // error replies, by request op and code

	// Fan-out counters.
	EventsQueued   uint64 // event frames queued to subscribers
	EventsDropped  uint64 // event frames not queued: the connection was closing or overflowed
	Messages       uint64 // message frames queued to recipients
	MessageDrops   uint64 // message frames not queued: past the recipient's message share
	RouteFailures  uint64 // sends to another gateway that failed
	DeltasWritten  uint64 // deltas this node wrote and published
	DeltasApplied  uint64 // remote deltas merged into the replica
	DeltasStale    uint64 // remote deltas that held nothing new (duplicates, older records)
	DeltasInvalid  uint64 // remote deltas refused as invalid
	PropagationLag LagHistogram

	// Panics counts the panics recovered while serving a client
	// connection: each closed that connection, and logged its stack.
	Panics uint64

	// Stalled is the total length of this gateway's own stalls (see
	// Config.StallThreshold).
	Stalled time.Duration

	// Webhooks counts the webhooks (webhook.go); zero when off.
	Webhooks WebhookStats
}

// OpCode is a request op and an error code: the key of
// Metrics.RequestErrors.
type OpCode struct {
	Op   string
	Code string
}

// Metrics returns a snapshot of the node's counters and gauges. It walks
// the connections and, with a disconnect grace, the local sessions under
// the node's lock (O(connections)): for monitoring, not hot paths.
func (n *Node) Metrics() Metrics {
	lk := lockOf(&n.mu)
	defer lk.unlock()
	m := Metrics{
		Node: n.cfg.Name, Connections: len(n.conns), LocalSessions: n.localCount, Draining: n.draining,
	}
	heartbeats := n.stats.heartbeats.Load()
	for c := range n.conns {
		heartbeats += c.heartbeats.Load()
		if len(c.subUsers)+len(c.subGroups) > 0 {
			m.Subscribers++
			m.UserSubscriptions += len(c.subUsers)
			m.GroupSubscriptions += len(c.subGroups)
		}
	}
	if n.cfg.DisconnectGrace > 0 {
		for _, devs := range n.local {
			for _, c := range devs {
				if c.graceDeadline.Load() != 0 {
					m.SessionsInGrace++
				}
			}
		}
	}
	m.Replica = n.replica.Census()
	m.EventStreams = len(n.streams.open)
	m.HTTPConnections = n.httpConns
	lk.unlock()
	m.EventStreamsOpened = n.streams.opened.Load()
	m.EventStreamEvents = n.streams.sent.Load()
	m.EventStreamsSlow = n.streams.slow.Load()
	m.EventStreamsTokenExpired = n.streams.tokenExpired.Load()
	m.EventStreamsKeyRemoved = n.streams.keyRemoved.Load()
	m.EventStreamsRefusedSubject = n.streams.refusedSubject.Load()
	m.EventStreamsRefusedIP = n.streams.refusedIP.Load()
	m.Panics = n.stats.panics.Load()
	m.HTTPOverloaded = n.stats.httpOverloaded.Load()
	m.HTTPTooManyConnections = n.stats.httpTooManyConnections.Load()

	c := &n.stats
	m.Accepted = c.accepted.Load()
	m.Overloaded = c.overloaded.Load()
	m.TooManyConnections = c.tooManyConnections.Load()
	m.OutOfFiles = c.outOfFiles.Load()
	m.MaxConnections, m.FileLimit = n.MaxConnections(), n.files
	m.SlowConsumers = c.slowConsumers.Load()
	m.SessionsOpened = c.sessionsOpened.Load()
	m.Expired = c.expired.Load()
	m.Superseded = c.superseded.Load()
	m.EventsQueued = c.events.Load()
	m.Messages = c.messages.Load()
	m.MessageDrops = c.messageDrops.Load()
	m.RouteFailures = c.routeFailures.Load()
	m.DeltasWritten = c.published.Load()

	mc := &c.m
	names := opNames()
	m.Requests = make(map[string]uint64, numOps)
	m.RequestErrors = make(map[OpCode]uint64)
	for op := range numOps {
		if op == opHB {
			m.Requests[names[op]] = heartbeats
		} else {
			m.Requests[names[op]] = mc.requests[op].Load()
		}
		for code := range codeOther + 1 {
			if v := mc.errors[op][code].Load(); v > 0 {
				m.RequestErrors[OpCode{Op: names[op], Code: codeName(code)}] = v
			}
		}
	}
	m.Disconnects = make(map[string]uint64)
	for r := range numReasons {
		if v := mc.disconnects[r].Load(); v > 0 || r == reasonBye || r == reasonClosed {
			m.Disconnects[reasonName(r)] = v
		}
	}
	m.EventsDropped = mc.eventsDropped.Load()
	m.DeltasApplied = mc.deltasApplied.Load()
	m.DeltasStale = mc.deltasStale.Load()
	m.DeltasInvalid = mc.deltasInvalid.Load()
	m.PropagationLag = mc.lag.snapshot()
	m.Stalled = time.Duration(n.stalled.Load())
	m.Webhooks = n.WebhookStats()
	return m
}

// totalDisconnects returns the sessions ended disconnected, every reason.
func (m *metricCounters) totalDisconnects() uint64 {
	var t uint64
	for i := range m.disconnects {
		t += m.disconnects[i].Load()
	}
	return t
}
