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

// RegionStatus is what a gateway of a multi-region cluster knows of its
// own region's bridges and of the other regions (GET /v1/regions, the
// status page's "Other regions"); the JSON names are part of both.
type RegionStatus struct {
	Region string `json:"region"`
	// ActiveBridge is this region's active bridge as this gateway
	// chooses it ("" when it knows no bridge-capable gateway).
	ActiveBridge string `json:"active_bridge"`
	// Bridges are this region's bridge-capable gateways shown up, sorted.
	Bridges []BridgeState `json:"bridges"`
	// Others are the other regions this gateway knows, sorted.
	Others []OtherRegion `json:"others"`
}

// BridgeState is one bridge-capable gateway of this gateway's region.
type BridgeState struct {
	Name   string `json:"name"`
	Active bool   `json:"active"`
	// Reach are the other regions it last reported it sees over the WAN
	// pool; Reported is false until it reported any (a gateway of an
	// earlier version never does).
	Reach    []string `json:"reach"`
	Reported bool     `json:"reported"`
}

// OtherRegion is another region as this gateway shows it.
type OtherRegion struct {
	Region string `json:"region"`
	// Bridge is its bridge that last spoke over the WAN pool (its active
	// bridge, unless it just moved).
	Bridge   string `json:"bridge"`
	Gateways int    `json:"gateways"` // its gateways its last announcement listed
	// Lease is "up", "expired" (not heard within the WAN lease: its
	// sessions are shown expired) or "reviving" (heard again, its missed
	// writes being pulled).
	Lease string `json:"lease"`
	// HeardAgoMS is how long ago it was last heard, in milliseconds; -1
	// when never.
	HeardAgoMS int64 `json:"heard_ago_ms"`
}
