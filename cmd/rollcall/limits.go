package main

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"time"

	"github.com/rollcall/rollcall/node"
	"github.com/rollcall/rollcall/protocol"
)

// limitFlags are the agent's flags for the gateway's abuse limits and the
// sizes of its buffers and windows (docs/operations/configuration.md, "Limits"). Each
// sets the node.Config field of the same name. Unlike a Config field, a
// flag's zero is never "the default": it is refused where it means nothing,
// and --event-coalesce 0 means no wait.
type limitFlags struct {
	registered bool // set by register: a zero agentFlags keeps the node's defaults

	requestRate         float64
	requestBurst        int
	maxSessionsPerUser  int
	maxConnectionsPerIP int

	maxLineBytes       int
	outboundQueue      int
	outboundQueueBytes int
	writeTimeout       time.Duration
	handshakeTimeout   time.Duration
	eventCoalesce      time.Duration
}

// register adds the flags to fs.
func (lf *limitFlags) register(fs *flag.FlagSet) {
	lf.registered = true
	fs.Float64Var(&lf.requestRate, "request-rate", node.DefaultRequestRate, "requests per second one connection may make on average, heartbeats included; more are refused rate_limited (negative: no limit)")
	fs.IntVar(&lf.requestBurst, "request-burst", node.DefaultRequestBurst, "requests one connection may make at once after a quiet spell")
	fs.IntVar(&lf.maxSessionsPerUser, "max-sessions-per-user", node.DefaultMaxSessionsPerUser, "active sessions one user may hold across the cluster; one more is refused too_many_sessions (negative: no cap)")
	fs.IntVar(&lf.maxConnectionsPerIP, "max-connections-per-ip", node.DefaultMaxConnectionsPerIP, "client connections one source address may hold on this gateway; one more is refused too_many_connections (negative: no cap)")
	fs.IntVar(&lf.maxLineBytes, "max-line-bytes", protocol.MaxLineBytes, "longest client request line in bytes; a longer one is refused line_too_long and the connection closed")
	fs.IntVar(&lf.outboundQueue, "outbound-queue", node.DefaultOutboundQueue, "frames that may wait for one client; a client that lets more pile up is dropped slow_consumer")
	fs.IntVar(&lf.outboundQueueBytes, "outbound-queue-bytes", node.DefaultOutboundQueueBytes, "bytes that may wait for one client (must exceed --max-line-bytes)")
	fs.DurationVar(&lf.writeTimeout, "write-timeout", node.DefaultWriteTimeout, "bound on one write to a client; a client that reads nothing for this long is dropped slow_consumer")
	fs.DurationVar(&lf.handshakeTimeout, "handshake-timeout", node.DefaultHandshakeTimeout, "time from connect to hello; a client slower than this is closed handshake_timeout")
	fs.DurationVar(&lf.eventCoalesce, "event-coalesce", node.DefaultEventCoalesce, "event-coalescing window: a presence change with no event flush in the last window goes out at once, changes within a window of a flush wait for its end and give one event per user (0: no window)")
}

// apply checks the flags and sets them on cfg, whose Heartbeat is already
// set. Every error names its flag.
func (lf *limitFlags) apply(cfg *node.Config) error {
	if !lf.registered {
		return nil
	}
	var errs []error
	bad := func(flagName string, value any, format string, args ...any) {
		errs = append(errs, fmt.Errorf("--%s %v: %s", flagName, value, fmt.Sprintf(format, args...)))
	}
	switch r := lf.requestRate; {
	case math.IsNaN(r) || math.IsInf(r, 0):
		bad("request-rate", r, "want a number")
	case r == 0:
		bad("request-rate", r, "want a positive rate, or a negative one for no limit")
	case r > 0 && r*cfg.Heartbeat.Seconds() < node.MinRequestsPerHeartbeat:
		bad("request-rate", r, "must allow at least %d requests per --heartbeat (%v), so clients heartbeating as told are never limited: at least %.3g",
			node.MinRequestsPerHeartbeat, cfg.Heartbeat, node.MinRequestsPerHeartbeat/cfg.Heartbeat.Seconds())
	}
	if lf.requestBurst < 1 {
		bad("request-burst", lf.requestBurst, "must be at least 1")
	}
	if lf.maxSessionsPerUser == 0 {
		bad("max-sessions-per-user", 0, "would refuse every hello; want a positive cap, or a negative one for no cap")
	}
	if lf.maxConnectionsPerIP == 0 {
		bad("max-connections-per-ip", 0, "would refuse every connection; want a positive cap, or a negative one for no cap")
	}
	if lf.maxLineBytes < node.MinMaxLineBytes {
		bad("max-line-bytes", lf.maxLineBytes, "must be at least %d", node.MinMaxLineBytes)
	}
	if lf.outboundQueue < 1 {
		bad("outbound-queue", lf.outboundQueue, "must be at least 1")
	}
	if lf.outboundQueueBytes <= lf.maxLineBytes {
		bad("outbound-queue-bytes", lf.outboundQueueBytes, "must exceed --max-line-bytes (%d), or the longest request's reply may not fit", lf.maxLineBytes)
	}
	if lf.writeTimeout <= 0 {
		bad("write-timeout", lf.writeTimeout, "must be positive")
	}
	if lf.handshakeTimeout <= 0 {
		bad("handshake-timeout", lf.handshakeTimeout, "must be positive")
	}
	if lf.eventCoalesce < 0 {
		bad("event-coalesce", lf.eventCoalesce, "must not be negative (0: no wait)")
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	cfg.RequestRate, cfg.RequestBurst = lf.requestRate, lf.requestBurst
	cfg.MaxSessionsPerUser, cfg.MaxConnectionsPerIP = lf.maxSessionsPerUser, lf.maxConnectionsPerIP
	cfg.MaxLineBytes, cfg.OutboundQueue, cfg.OutboundQueueBytes = lf.maxLineBytes, lf.outboundQueue, lf.outboundQueueBytes
	cfg.WriteTimeout, cfg.HandshakeTimeout = lf.writeTimeout, lf.handshakeTimeout
	cfg.EventCoalesce = lf.eventCoalesce
	if cfg.EventCoalesce == 0 {
		cfg.EventCoalesce = -1 // node.Config's "no wait"; its zero is the default
	}
	return nil
}
