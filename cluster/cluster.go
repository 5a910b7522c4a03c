// Package cluster holds the values that pass between a gateway (package
// node) and the layer that joins it to its peers (package gossip), so that
// neither package imports the other: the simulator and the gossip layer
// build without the gateway's client protocol, authentication or HTTP code.
//
// It is plain data: no goroutines, no I/O, no imports beyond the standard
// library. The interfaces over these values belong to the packages that
// consume them: node.Cluster and its optional extensions (node.Membership,
// node.ReadinessReporter, …) in node, gossip.Host in gossip.
package cluster

import "encoding/json"

// Message is a user-to-user message routed through the gateway that owns
// each recipient session: node hands it to its Cluster's Route, and the
// owning gateway's Cluster gives it to its Host's DeliverLocal.
type Message struct {
	To         string          `msgpack:"t"`
	From       string          `msgpack:"f"`
	FromDevice string          `msgpack:"d"`
	Body       json.RawMessage `msgpack:"b"`
}

// MemberState is one cluster member as a gateway's status page shows it
// (GET /v1/ui/summary); the JSON names are part of that endpoint.
type MemberState struct {
	Name       string `json:"name"`
	State      string `json:"state"`       // alive, suspect, dead or left
	ClientAddr string `json:"client_addr"` // where its clients connect
	Sessions   int    `json:"sessions"`    // active sessions it owns, as it last announced
	// LeaseExpired is true when this node shows the member's sessions
	// expired (its lease passed, or it was declared failed).
	LeaseExpired bool `json:"lease_expired"`
	Self         bool `json:"self"`
}
