// Package sim is Rollcall's convergence simulator: a deterministic
// discrete-event simulation, in virtual time and with a seeded RNG, of a
// cluster running the project's own crdt/ merge code and gossip/ dissemination
// decisions. It opens no sockets and never sleeps.
package sim
