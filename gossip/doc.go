// Package gossip wires Rollcall nodes together with hashicorp/memberlist:
// membership, failure detection, dissemination of session deltas, anti-entropy
// and routed messages, and the wire codec of gossip messages.
//
// It moves bytes and drives decisions; the merge rules live in crdt/. The
// dissemination decisions are pure functions shared with sim/.
package gossip
