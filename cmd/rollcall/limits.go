package main

import (
	"errors"
	"fmt"
	"math"

	"github.com/rollcall/rollcall/node"
	"github.com/rollcall/rollcall/protocol"
)

// checkLimitFlags checks the limit, buffer and window flags as bound onto
// cfg (docs/operations/configuration.md, "Limits"), before cfg.Validate:
// unlike a Config field, such a flag's zero is never "the default" (the
// default is already in the field): it is refused where it means nothing.
// Every error names its flag.
func checkLimitFlags(cfg node.Config) error {
	var errs []error
	bad := func(flagName string, value any, format string, args ...any) {
		errs = append(errs, fmt.Errorf("--%s %v: %s", flagName, value, fmt.Sprintf(format, args...)))
	}
	switch r := cfg.RequestRate; {
	case math.IsNaN(r) || math.IsInf(r, 0):
		bad("request-rate", r, "want a number")
	case r == 0:
		bad("request-rate", r, "want a positive rate, or a negative one for no limit")
	case r > 0 && r*cfg.Heartbeat.Seconds() < node.MinRequestsPerHeartbeat:
		bad("request-rate", r, "must allow at least %d requests per --heartbeat (%v), so clients heartbeating as told are never limited: at least %.3g",
			node.MinRequestsPerHeartbeat, cfg.Heartbeat, node.MinRequestsPerHeartbeat/cfg.Heartbeat.Seconds())
	}
	if cfg.RequestBurst < 1 {
		bad("request-burst", cfg.RequestBurst, "must be at least 1")
	}
	if cfg.MaxSessionsPerUser == 0 {
		bad("max-sessions-per-user", 0, "would refuse every hello; want a positive cap, or a negative one for no cap")
	}
	switch r := cfg.TrackRate; {
	case math.IsNaN(r) || math.IsInf(r, 0):
		bad("track-rate", r, "want a number")
	case r == 0:
		bad("track-rate", r, "want a positive rate, or a negative one for no limit")
	}
	if cfg.TrackBurst < protocol.MaxTrackPerRequest {
		bad("track-burst", cfg.TrackBurst, "must be at least %d, the sessions of one track", protocol.MaxTrackPerRequest)
	}
	if cfg.MaxTrackedPerConnection == 0 {
		bad("max-tracked-per-connection", 0, "would refuse every track; want a positive cap, or a negative one for no cap")
	}
	if cfg.MaxConnectionsPerIP == 0 {
		bad("max-connections-per-ip", 0, "would refuse every connection; want a positive cap, or a negative one for no cap")
	}
	if cfg.MaxLineBytes < node.MinMaxLineBytes {
		bad("max-line-bytes", cfg.MaxLineBytes, "must be at least %d", node.MinMaxLineBytes)
	}
	if cfg.OutboundQueue < 1 {
		bad("outbound-queue", cfg.OutboundQueue, "must be at least 1")
	}
	if cfg.OutboundQueueBytes <= cfg.MaxLineBytes {
		bad("outbound-queue-bytes", cfg.OutboundQueueBytes, "must exceed --max-line-bytes (%d), or the longest request's reply may not fit", cfg.MaxLineBytes)
	}
	if cfg.WriteTimeout <= 0 {
		bad("write-timeout", cfg.WriteTimeout, "must be positive")
	}
	if cfg.HandshakeTimeout <= 0 {
		bad("handshake-timeout", cfg.HandshakeTimeout, "must be positive")
	}
	if cfg.EventCoalesce < 0 {
		bad("event-coalesce", cfg.EventCoalesce, "must not be negative (0: no wait)")
	}
	return errors.Join(errs...)
}
