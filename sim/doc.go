// Package sim is Rollcall's convergence simulator: a deterministic
// discrete-event simulation, in virtual time and with a seeded RNG, of a
// cluster running the project's own crdt/ merge code and gossip/ dissemination
// decisions. It opens no sockets and never sleeps; the same Config (seed
// included) gives the same Result, byte for byte.
//
// Every simulated gateway holds a real crdt.Replica, a real dissem.Node
// (the protocol core gossip.Cluster drives too: every decision of
// batching, packing, mode, targets, relays, leases, gap pulls, answers,
// revivals and rejoins is the core's) and two piggyback queues with
// memberlist's TransmitLimitedQueue semantics (queue.go, tested against
// memberlist's own queue with gossip's broadcast types in queue_test.go).
// rollcall.go drives the core: it feeds it owner writes, received
// messages, memberlist's events and the passing of time, and carries out
// its Ready over the simulated network and replica. Rollcall's messages
// are the core's own encodings, so their sizes are the real ones
// (fidelity_test.go checks them against real gossip.Clusters fed the same
// writes); memberlist's own messages are sized field by field in sizes.go.
// memberlist's failure detector and membership are modelled from its
// source (membership.go, probe.go); the network (network.go, latency.go),
// the faults (faults.go) and the clients (clients.go, which use crdt's
// owner rules as node/ does) are models; metrics.go and result.go say what
// is measured.
//
// The package is a library: it takes a Config and returns a Result. It
// parses no flags and draws nothing (`rollcall sim`'s flags, table, JSON and
// CSV output and plots are in sim/simcli, which only cmd/rollcall imports;
// TestLibraryImportsNoCLI checks it). It must not import node/ nor start a
// gossip.Cluster: sim/calibrate starts real clusters, to check the simulator
// against them. ParseLatency, ParsePartition, ParseCrash and ParseChurn read
// the text forms of a scenario's parts.
//
// The driving loop:
//
//	s, err := sim.New(cfg)  // validate cfg; every node joined, its timers at
//	                        // random phases; the workload and faults scheduled
//	res, err := s.Run(ctx)  // pop the earliest event, advance the clock and
//	                        // dispatch it: a packet or stream to its node, a
//	                        // node's timer, a client action or session expiry,
//	                        // a partition, heal, crash or restart; until
//	                        // Duration (with Config.Check, every replica's
//	                        // invariants are checked after each event)
//
// sim.Run(ctx, cfg) does both. Events at the same instant run in the order
// they were scheduled. All randomness comes from one PCG stream seeded by
// Config.Seed, drawn in event order.
package sim
