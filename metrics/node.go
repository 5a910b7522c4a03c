package metrics

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/node"
)

// NewNodeCollector returns a collector of a gateway's metrics: its
// connections, sessions, requests, fan-out, remote deltas and their
// propagation lag. Each scrape takes one node.Metrics snapshot, which
// walks the node's connections under its lock.
func NewNodeCollector(n *node.Node) prometheus.Collector {
	c := newSnapshotCollector(n.Metrics, nodeDefs())
	lag := prometheus.NewDesc(Namespace+"_propagation_lag_seconds",
		"Time from a change's write at its owning gateway (the owner's clock, in the record) to its merge here, "+
			"for remote deltas that changed the replica. Includes the clock offset between the two gateways.", nil, nil)
	c.extraDescs = []*prometheus.Desc{lag}
	c.extra = func(m *node.Metrics, ch chan<- prometheus.Metric) {
		h := m.PropagationLag
		buckets := make(map[float64]uint64, len(h.Bounds))
		var cum uint64
		for i, b := range h.Bounds {
			cum += h.Counts[i]
			buckets[b] = cum
		}
		ch <- prometheus.MustNewConstHistogram(lag, h.Count(), h.Sum.Seconds(), buckets)
	}
	return c
}

// sessionStates returns the crdt states in index order, as label values.
func sessionStates() []string {
	out := make([]string, crdt.NumStates)
	for i := range out {
		out[i] = crdt.State(i).String()
	}
	return out
}

func nodeDefs() []metricDef[node.Metrics] {
	type M = node.Metrics
	return []metricDef[M]{
		// Connections.
		gauge("connections", "Open client connections, sessions and handshakes in progress.",
			func(m *M) float64 { return float64(m.Connections) }),
		counter("connections_accepted_total", "Client connections accepted.",
			func(m *M) uint64 { return m.Accepted }),
		{name: "connections_rejected_total", typ: prometheus.CounterValue, labels: []string{"reason"},
			help: "Client connections refused at once, by reason (overloaded: the gateway held its connection cap, " +
				"rollcall_max_connections; out_of_files: accept found no file descriptor left, the client was told overloaded; " +
				"too_many_connections: the source address held MaxConnectionsPerIP).",
			collect: func(m *M, emit func(float64, ...string)) {
				emit(float64(m.Overloaded-m.OutOfFiles), "overloaded")
				emit(float64(m.OutOfFiles), "out_of_files")
				emit(float64(m.TooManyConnections), "too_many_connections")
			}},
		gauge("max_connections", "The client connections this gateway holds at most: --max-connections, or less when "+
			"the open-file limit (rollcall_open_file_limit) holds fewer; -1: no cap.",
			func(m *M) float64 { return float64(m.MaxConnections) }),
		gauge("open_file_limit", "The open-file limit (RLIMIT_NOFILE) the gateway keeps its connections under; 0: none known.",
			func(m *M) float64 { return float64(m.FileLimit) }),
		counter("panics_total", "Panics recovered while serving a client connection: each closed that connection "+
			"(with an internal error line when a request panicked) and logged its stack at error level.",
			func(m *M) uint64 { return m.Panics }),
		counter("slow_consumer_disconnects_total",
			"Connections dropped because the client did not read: its outbound queue overflowed or a write timed out.",
			func(m *M) uint64 { return m.SlowConsumers }),
		gauge("draining", "1 while the gateway drains for shutdown, else 0.",
			func(m *M) float64 { return boolFloat(m.Draining) }),

		// Sessions.
		{name: "sessions", typ: prometheus.GaugeValue, labels: []string{"owner", "state"},
			help: "Session records in this gateway's replica, by owner (local: this gateway, remote: others) and by the " +
				"state the projection shows (an active session of a gateway marked down is expired). " +
				"owner=\"local\",state=\"active\" is the sessions connected here.",
			collect: func(m *M, emit func(float64, ...string)) {
				for i, st := range sessionStates() {
					emit(float64(m.Replica.Local[i]), "local", st)
					emit(float64(m.Replica.Remote[i]), "remote", st)
				}
			}},
		counter("sessions_opened_total", "Sessions opened (successful hellos).",
			func(m *M) uint64 { return m.SessionsOpened }),
		{name: "sessions_disconnected_total", typ: prometheus.CounterValue, labels: []string{"reason"},
			help: "Sessions this gateway ended as disconnected, by reason: bye, closed (the client or the network " +
				"closed the connection), or the error code the gateway closed it with (slow_consumer, line_too_long, " +
				"shutting_down, ...).",
			collect: func(m *M, emit func(float64, ...string)) {
				for _, r := range sortedKeys(m.Disconnects) {
					emit(float64(m.Disconnects[r]), r)
				}
			}},
		gauge("sessions_in_grace", "Sessions this gateway holds for the disconnect grace: their client dropped the connection "+
			"without bye, and they show online until a reconnect takes them over or the grace ends.",
			func(m *M) float64 { return float64(m.SessionsInGrace) }),
		counter("sessions_expired_total", "Sessions this gateway expired: no request within the timeout.",
			func(m *M) uint64 { return m.Expired }),
		counter("sessions_superseded_total",
			"Connections closed because a newer connection of the same user and device (here or on another gateway) took their session.",
			func(m *M) uint64 { return m.Superseded }),
		gauge("replica_users", "Users with records in this gateway's replica.",
			func(m *M) float64 { return float64(m.Replica.Users) }),
		gauge("replica_accounts", "Account records in this gateway's replica.",
			func(m *M) float64 { return float64(m.Replica.Accounts) }),
		gauge("replica_origins", "Gateway incarnations this replica holds records of.",
			func(m *M) float64 { return float64(m.Replica.Origins) }),

		// Requests.
		{name: "requests_total", typ: prometheus.CounterValue, labels: []string{"op"},
			help: "Client requests handled, by op (hb counts every heartbeat; unknown counts lines naming no known op).",
			collect: func(m *M, emit func(float64, ...string)) {
				for _, op := range sortedKeys(m.Requests) {
					emit(float64(m.Requests[op]), op)
				}
			}},
		{name: "request_errors_total", typ: prometheus.CounterValue, labels: []string{"op", "code"},
			help: "Error replies to client requests, by the request's op and the error code.",
			collect: func(m *M, emit func(float64, ...string)) {
				keys := make([]node.OpCode, 0, len(m.RequestErrors))
				for k := range m.RequestErrors {
					keys = append(keys, k)
				}
				slices.SortFunc(keys, func(a, b node.OpCode) int {
					if a.Op != b.Op {
						return compare(a.Op, b.Op)
					}
					return compare(a.Code, b.Code)
				})
				for _, k := range keys {
					emit(float64(m.RequestErrors[k]), k.Op, k.Code)
				}
			}},

		// Fan-out.
		gauge("subscribers", "Connections with at least one subscription.",
			func(m *M) float64 { return float64(m.Subscribers) }),
		{name: "subscriptions", typ: prometheus.GaugeValue, labels: []string{"kind"},
			help: "Subscriptions held by this gateway's connections, by kind (user or group).",
			collect: func(m *M, emit func(float64, ...string)) {
				emit(float64(m.UserSubscriptions), "user")
				emit(float64(m.GroupSubscriptions), "group")
			}},
		gauge("event_streams", "Open change streams (GET /v1/events).",
			func(m *M) float64 { return float64(m.EventStreams) }),
		counter("event_streams_opened_total", "Change streams (GET /v1/events) opened.",
			func(m *M) uint64 { return m.EventStreamsOpened }),
		counter("event_stream_events_total", "Events written to change streams, snapshots included.",
			func(m *M) uint64 { return m.EventStreamEvents }),
		counter("event_stream_slow_total", "Change streams ended because their queue overflowed (the reader was too slow).",
			func(m *M) uint64 { return m.EventStreamsSlow }),
		{name: "event_streams_ended_total", typ: prometheus.CounterValue, labels: []string{"reason"},
			help: "Change streams the gateway ended for their token, by reason (token_expired: the token expired; " +
				"key_removed: after a key rotation no key verifies it).",
			collect: func(m *M, emit func(float64, ...string)) {
				emit(float64(m.EventStreamsTokenExpired), "token_expired")
				emit(float64(m.EventStreamsKeyRemoved), "key_removed")
			}},
		{name: "event_streams_rejected_total", typ: prometheus.CounterValue, labels: []string{"reason"},
			help: "Change streams refused with 429, by reason (subject: the token's subject held MaxEventStreamsPerSubject; " +
				"ip: the source address held MaxEventStreamsPerIP).",
			collect: func(m *M, emit func(float64, ...string)) {
				emit(float64(m.EventStreamsRefusedSubject), "subject")
				emit(float64(m.EventStreamsRefusedIP), "ip")
			}},
		gauge("http_connections", "Open HTTP connections (the HTTP port and the WebSocket listener; an upgraded WebSocket counts as a client connection).",
			func(m *M) float64 { return float64(m.HTTPConnections) }),
		{name: "http_connections_rejected_total", typ: prometheus.CounterValue, labels: []string{"reason"},
			help: "HTTP connections refused at accept, by reason (overloaded: the HTTP listeners held MaxHTTPConnections, " +
				"answered 503; too_many_connections: the source address held --max-connections-per-ip, answered 429).",
			collect: func(m *M, emit func(float64, ...string)) {
				emit(float64(m.HTTPOverloaded), "overloaded")
				emit(float64(m.HTTPTooManyConnections), "too_many_connections")
			}},
		counter("events_delivered_total", "Presence events queued to subscribers' connections.",
			func(m *M) uint64 { return m.EventsQueued }),
		counter("events_dropped_total",
			"Presence events not queued: the subscriber's connection was closing, or overflowed and was dropped as a slow consumer.",
			func(m *M) uint64 { return m.EventsDropped }),
		counter("messages_delivered_total", "Messages (send) queued to recipient sessions on this gateway.",
			func(m *M) uint64 { return m.Messages }),
		counter("messages_dropped_total",
			"Messages not queued to a recipient session here: its queue was past its share for messages.",
			func(m *M) uint64 { return m.MessageDrops }),
		counter("route_failures_total", "Sends to recipients on another gateway, and kicks of sessions another gateway owns, whose routing failed.",
			func(m *M) uint64 { return m.RouteFailures }),

		// Webhooks.
		counter("webhook_events_total", "Webhook events this gateway sent as the user's notifier (each to every URL), "+
			"resent ones included.",
			func(m *M) uint64 { return m.Webhooks.Events + m.Webhooks.Replayed }),
		counter("webhook_replayed_total", "Webhook events sent again because the gateway that was to send them "+
			"left this gateway's view (failed or left) within --webhook-handoff.",
			func(m *M) uint64 { return m.Webhooks.Replayed }),
		counter("webhook_other_region_total", "Webhook events this gateway, their notifier in its region, left to "+
			"the region where their change was made (a multi-region cluster).",
			func(m *M) uint64 { return m.Webhooks.OtherRegion }),
		counter("webhook_sent_total", "Webhook deliveries (an event to one URL) the receiver accepted with a 2xx.",
			func(m *M) uint64 { return m.Webhooks.Sent }),
		counter("webhook_failed_total", "Webhook deliveries given up: --webhook-attempts failed, or 410 Gone.",
			func(m *M) uint64 { return m.Webhooks.Failed }),
		counter("webhook_retries_total", "Failed webhook attempts that were scheduled again.",
			func(m *M) uint64 { return m.Webhooks.Retried }),
		counter("webhook_dropped_total", "Webhook deliveries dropped: the queue (--webhook-queue) was full, "+
			"or the gateway closed with them queued.",
			func(m *M) uint64 { return m.Webhooks.Dropped }),
		gauge("webhook_queue_depth", "Webhook deliveries waiting, in flight or waiting for a retry.",
			func(m *M) float64 { return float64(m.Webhooks.Queued) }),
		counter("webhook_shadow_overwritten_total", "Webhook events kept for another notifier that were pushed out "+
			"of the shadow within --webhook-handoff: had that notifier failed, they would not have been sent again.",
			func(m *M) uint64 { return m.Webhooks.ShadowOverwritten }),

		// Replication, as the node sees it.
		counter("deltas_written_total", "Changes this gateway wrote and published (connects, status and group changes, ends).",
			func(m *M) uint64 { return m.DeltasWritten }),
		{name: "deltas_received_total", typ: prometheus.CounterValue, labels: []string{"result"},
			help: "Remote deltas handed to this gateway, by result: applied (merged), stale (nothing new: a duplicate " +
				"or an older record) or invalid (refused).",
			collect: func(m *M, emit func(float64, ...string)) {
				emit(float64(m.DeltasApplied), "applied")
				emit(float64(m.DeltasStale), "stale")
				emit(float64(m.DeltasInvalid), "invalid")
			}},
		counter("propagation_lag_negative_total",
			"Applied remote deltas written, by their owner's clock, after this gateway's clock said they arrived (clock skew); "+
				"observed as 0 in rollcall_propagation_lag_seconds.",
			func(m *M) uint64 { return m.PropagationLag.Negative }),
		{name: "stall_seconds_total", typ: prometheus.CounterValue,
			help: "Time this gateway's own process was stalled (stopped, paused, starved of CPU) as its expiry sweeper " +
				"measured it; session deadlines are extended by it.",
			collect: func(m *M, emit func(float64, ...string)) { emit(m.Stalled.Seconds()) }},
	}
}

// sortedKeys returns a map's keys in order, so samples come out in a
// stable order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func compare(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
