// Package webhook tells an application's backend, over HTTP, when its users
// come online, go offline and change status: signed as the Standard Webhooks
// specification says (https://www.standardwebhooks.com), retried, and sent
// by exactly one gateway per user.
//
// It owns three things, one file each:
//
//	decide.go    what event, if any, a change of a user's presence makes,
//	             and its id (pure: a function of the projection)
//	notifier.go  which gateway announces a user (rendezvous hashing over the
//	             live gateways), how responsibility lingers while the
//	             membership changes (Handoff), and the events a gateway keeps
//	             in case the gateway that should have sent them fails
//	             (Shadow); pure, time passed in
//	sign.go      secrets, signatures and their verification
//	sender.go    the delivery queue: bounded, retried with exponential
//	             backoff, over keep-alive connections (the only I/O here)
//
// The gateway (package node) drives it: at each event flush it asks Decide
// about every changed user, asks Handoff whether it is the user's notifier,
// and hands the events it must send to the Sender. Every gateway makes the
// same decisions from the same replicated state, so the event a survivor
// sends for a failed gateway's users has the id the failed gateway would
// have given it, and a receiver that deduplicates by webhook-id sees each
// change once.
//
// It does not log (it reports failures through Config.Report) and holds no
// package-level state.
package webhook
