package crdt

// ActiveByGateway counts the sessions that are active in this replica's
// projection, by the gateway that owns them: a gateway marked down (or a
// retired incarnation) counts none. Gateways with no active session are
// absent. It walks the sessions: O(records), for status pages and metrics,
// not for hot paths.
func (r *Replica) ActiveByGateway() map[string]int {
	out := make(map[string]int)
	r.recs.each(func(_ recID, rec *record) {
		if rec.counted {
			out[r.originList[rec.origin].origin.Node]++
		}
	})
	return out
}
