// Package sim is Rollcall's convergence simulator: a deterministic
// discrete-event simulation, in virtual time and with a seeded RNG, of a
// cluster running the project's own crdt/ merge code and gossip/ dissemination
// decisions. It opens no sockets and never sleeps; the same Config (seed
// included) gives the same Result, byte for byte.
//
// Every simulated gateway holds a real crdt.Replica and two piggyback queues
// with memberlist's TransmitLimitedQueue semantics (queue.go, tested against
// memberlist's own queue), and handles messages the way gossip.Cluster does
// (rollcall.go mirrors cluster.go function by function, calling the shared
// pure code of gossip/plan.go). memberlist's failure detector and push/pull
// are modelled from its source (membership.go, probe.go); the network
// (network.go) and the clients (clients.go) are models. The package must not
// import node/ nor start a gossip.Cluster: sim/calibrate does that, to check
// the simulator against a real cluster.
//
// The driving loop:
//
//	s, _ := sim.New(cfg)       // every node joined, timers at random phases
//	res, _ := s.Run(ctx)       // pop the earliest event, advance the clock,
//	                           // dispatch: a packet to its node, a timer, a
//	                           // client action, a fault; until Duration
//	sim.WriteJSON(os.Stdout, []sim.Row{{Result: res}})
//
// Events at the same instant run in the order they were scheduled. All
// randomness comes from one PCG stream seeded by Config.Seed, drawn in event
// order.
package sim
