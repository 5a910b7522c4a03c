// Package chaos runs real `rollcall agent` processes under a seeded fault
// schedule and a seeded client workload, records everything that happened
// as a JSONL history, and checks the history against the four promises
// (docs/chaos.md): convergence, nothing lost, no ghosts, order.
//
// It owns no gateway code and imports none: the agents are black boxes
// started from a binary, spoken to over the client protocol (protocol.go)
// and their HTTP endpoint, and hurt only from outside (signals, garbage on
// their ports). The checker (check*.go) reads nothing but the history file,
// so a saved history can be checked again, by hand or in a test.
//
// One run (Run):
//
//	build/locate bin/rollcall
//	start N agents on loopback, wait until each lists N alive members
//	start observers: per gateway, a subscriber to every workload user and
//	  a poller sending get every 250ms               -> obs records
//	start the workload: one actor per (user, device) -> op and end records
//	inject the fault schedule in [warm-up, FaultEnd)  -> gw and fault records
//	  FaultEnd .. SettleStart: workload only
//	  SettleStart .. Stop: heartbeats only, so every projection can settle
//	stop: record "stop", close every client, kill every agent
//	Check(history.jsonl) -> violations, each with the history lines showing it
//
// The bounds each rule uses are derived from the agent settings in
// bounds.go; docs/chaos.md states them with their formulas.
package chaos
