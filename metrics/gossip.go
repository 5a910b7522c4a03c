package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/rollcall/rollcall/gossip"
)

// clusterSnapshot is what one scrape reads of a cluster.
type clusterSnapshot struct {
	stats    *gossip.Stats // live atomics, read once each
	sent     []gossip.Traffic
	received []gossip.Traffic
	members  map[string]int // by state, this node included
	down     int            // members whose sessions this node shows expired
	health   int
	queued   int
	incoming int // paged anti-entropy answers being received
	// regions: this gateway is its region's active bridge; how many other
	// regions it shows expired
	bridge      bool
	regionsDown int
}

// memberStates are the states rollcall_gossip_members reports, zeros
// included: gossip.Member.State's, which follow memberlist's join and
// leave events (memberlist's own view, suspects included, is
// rollcall_memberlist_members).
func memberStates() []string { return []string{"alive", "dead", "left"} }

// NewClusterCollector returns a collector of the cluster layer's metrics:
// gossip traffic by message type, anti-entropy, leases, members and
// memberlist's health score.
func NewClusterCollector(c *gossip.Cluster) prometheus.Collector {
	snapshot := func() clusterSnapshot {
		s := clusterSnapshot{stats: c.Stats(), members: make(map[string]int), health: c.HealthScore(), queued: c.QueuedBroadcasts(),
			incoming: c.IncomingTransfers()}
		s.sent, s.received = s.stats.Sent(), s.stats.Received()
		s.bridge = c.ActiveBridge()
		for _, r := range c.Regions() {
			if r.Down {
				s.regionsDown++
			}
		}
		for _, m := range c.Members() {
			s.members[m.State]++
			if m.LeaseExpired {
				s.down++
			}
		}
		return s
	}
	return newSnapshotCollector(snapshot, clusterDefs())
}

func clusterDefs() []metricDef[clusterSnapshot] {
	type S = clusterSnapshot
	traffic := func(name, help string, sent bool, bytes bool) metricDef[S] {
		labels := []string{"type"}
		if sent {
			labels = append(labels, "transport")
		}
		return metricDef[S]{name: name, help: help, typ: prometheus.CounterValue, labels: labels,
			collect: func(s *S, emit func(float64, ...string)) {
				ts := s.received
				if sent {
					ts = s.sent
				}
				for _, t := range ts {
					v := t.Messages
					if bytes {
						v = t.Bytes
					}
					if sent {
						emit(float64(v), t.Type, t.Transport)
					} else {
						emit(float64(v), t.Type)
					}
				}
			}}
	}
	stat := func(name, help string, v func(st *gossip.Stats) uint64) metricDef[S] {
		return counter(name, help, func(s *S) uint64 { return v(s.stats) })
	}
	return []metricDef[S]{
		traffic("gossip_messages_sent_total",
			"Rollcall gossip messages sent, by message type and transport (packet: UDP; stream: TCP; broadcast: "+
				"piggybacked on memberlist's gossip, once per retransmit; pushpull: memberlist's state exchange).", true, false),
		traffic("gossip_sent_bytes_total", "Bytes of Rollcall gossip messages sent, by message type and transport.", true, true),
		traffic("gossip_messages_received_total",
			"Rollcall gossip messages received, by message type (invalid: not a message of this wire version).", false, false),
		traffic("gossip_received_bytes_total", "Bytes of Rollcall gossip messages received, by message type.", false, true),
		stat("gossip_send_errors_total", "Gossip sends that failed.",
			func(st *gossip.Stats) uint64 { return st.SendErrors.Load() }),
		stat("gossip_bad_messages_total", "Received gossip messages dropped as garbage or refused as invalid.",
			func(st *gossip.Stats) uint64 { return st.BadMessages.Load() }),
		{name: "gossip_refused_total", typ: prometheus.CounterValue, labels: []string{"reason"},
			help: "Values from peers refused as out of bounds (a hostile or broken sender), by reason: incarnation or stamp " +
				"(too far past this gateway's clock), version or epoch (above 2^53-1), client_addr (not the member's own).",
			collect: func(s *S, emit func(float64, ...string)) {
				for _, r := range s.stats.Refusals() {
					emit(float64(r.Count), r.Reason)
				}
			}},
		stat("gossip_inbound_dropped_total", "Received gossip messages dropped because the inbound queue was full.",
			func(st *gossip.Stats) uint64 { return st.InboundDropped.Load() }),
		stat("gossip_delta_copies_sent_total", "Delta copies sent directly to members (one per delta and member).",
			func(st *gossip.Stats) uint64 { return st.DeltaCopies.Load() }),
		gauge("gossip_broadcast_queue_messages", "Messages waiting in the epidemic broadcast queue.",
			func(s *S) float64 { return float64(s.queued) }),
		stat("gossip_broadcast_queue_prunes_total", "Times the epidemic broadcast queue was pruned to its bound.",
			func(st *gossip.Stats) uint64 { return st.QueuePruned.Load() }),

		// Anti-entropy.
		stat("gossip_gap_pulls_total", "Pulls sent because a member's announced watermark stayed ahead of ours (a lost delta).",
			func(st *gossip.Stats) uint64 { return st.GapPulls.Load() }),
		stat("gossip_sync_answers_dropped_total", "Anti-entropy requests not answered because too many were being answered at once.",
			func(st *gossip.Stats) uint64 { return st.AnswersDropped.Load() }),
		stat("gossip_sync_records_sent_total", "Records sent in anti-entropy answers (syncs).",
			func(st *gossip.Stats) uint64 { return st.SyncRecordsSent.Load() }),
		stat("gossip_sync_records_received_total", "Records received in anti-entropy answers (syncs).",
			func(st *gossip.Stats) uint64 { return st.SyncRecordsReceived.Load() }),
		stat("gossip_sync_pages_sent_total", "Pages of anti-entropy answers sent (an answer goes a page at a time).",
			func(st *gossip.Stats) uint64 { return st.SyncPagesSent.Load() }),
		stat("gossip_sync_pages_received_total", "Pages of anti-entropy answers received.",
			func(st *gossip.Stats) uint64 { return st.SyncPagesReceived.Load() }),
		gauge("gossip_transfers_incoming", "Paged anti-entropy answers this gateway is receiving (a state transfer: joining, restarted or lagging).",
			func(s *S) float64 { return float64(s.incoming) }),
		{name: "gossip_transfers_total", typ: prometheus.CounterValue, labels: []string{"outcome"},
			help: "Paged anti-entropy answers this gateway received, by outcome (started; done: to the last page; " +
				"abandoned: stalled repeatedly, left to anti-entropy).",
			collect: func(s *S, emit func(float64, ...string)) {
				emit(float64(s.stats.TransfersStarted.Load()), "started")
				emit(float64(s.stats.TransfersDone.Load()), "done")
				emit(float64(s.stats.TransfersAbandoned.Load()), "abandoned")
			}},

		// Liveness.
		stat("gossip_leases_expired_total", "Members whose lease passed without a word from them: their sessions were shown expired.",
			func(st *gossip.Stats) uint64 { return st.LeasesExpired.Load() }),
		{name: "gossip_member_failures_total", typ: prometheus.CounterValue, labels: []string{"state"},
			help: "Members memberlist reported gone whose sessions were then shown expired, by state (dead: failed; left: gracefully).",
			collect: func(s *S, emit func(float64, ...string)) {
				emit(float64(s.stats.MembersFailed.Load()), "dead")
				emit(float64(s.stats.MembersLeft.Load()), "left")
			}},
		{name: "gossip_members", typ: prometheus.GaugeValue, labels: []string{"state"},
			help: "Cluster members this gateway knows, itself included, by memberlist state.",
			collect: func(s *S, emit func(float64, ...string)) {
				for _, st := range memberStates() {
					emit(float64(s.members[st]), st)
				}
			}},
		gauge("gossip_members_down", "Members whose sessions this gateway shows expired (lease passed, declared failed, or catching up after it).",
			func(s *S) float64 { return float64(s.down) }),

		// Regions (docs/operations.md#multi-region).
		gauge("gossip_active_bridge", "1 while this gateway is its region's active bridge, else 0.",
			func(s *S) float64 {
				if s.bridge {
					return 1
				}
				return 0
			}),
		stat("gossip_bridge_changes_total", "Times this gateway became, or ceased to be, its region's active bridge.",
			func(st *gossip.Stats) uint64 { return st.BridgeChanges.Load() }),
		gauge("gossip_regions_down", "Other regions whose sessions this gateway shows expired (not heard within --wan-lease).",
			func(s *S) float64 { return float64(s.regionsDown) }),
		stat("gossip_regions_expired_total", "Times another region was not heard within --wan-lease and its sessions were shown expired.",
			func(st *gossip.Stats) uint64 { return st.RegionsExpired.Load() }),
		stat("gossip_region_pulls_total", "Pulls of what another region's announcement showed this gateway lacked.",
			func(st *gossip.Stats) uint64 { return st.RegionPulls.Load() }),
		stat("gossip_wan_delta_copies_total", "Deltas this gateway sent over the WAN pool (one per change per other region, from the active bridge).",
			func(st *gossip.Stats) uint64 { return st.WANDeltaCopies.Load() }),
		stat("gossip_wan_messages_sent_total", "Messages this gateway sent over the WAN pool.",
			func(st *gossip.Stats) uint64 { return st.WANMessagesSent.Load() }),
		stat("gossip_wan_sent_bytes_total", "Bytes of the messages this gateway sent over the WAN pool.",
			func(st *gossip.Stats) uint64 { return st.WANBytesSent.Load() }),
		stat("gossip_wan_messages_received_total", "Messages this gateway received over the WAN pool.",
			func(st *gossip.Stats) uint64 { return st.WANMessagesReceived.Load() }),
		gauge("memberlist_health_score",
			"memberlist's health (awareness) score: 0 is healthy; higher means this node misses probe acks, "+
				"is likely the slow or cut-off one, and waits longer before suspecting others.",
			func(s *S) float64 { return float64(s.health) }),
	}
}
