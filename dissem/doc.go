// Package dissem is Rollcall's dissemination and anti-entropy protocol as a
// deterministic state machine, and its wire format: every decision of how
// an owner's writes reach the other gateways and how replicas repair what
// was lost, in the way etcd-io/raft separates its state machine from the
// application that does I/O. It starts no goroutine, does no I/O, reads no
// clock (time is an argument) and draws randomness only from the source in
// its Config. gossip.Cluster drives one Node per gateway over memberlist;
// the simulator (sim/) drives one per simulated gateway in virtual time.
// Both run the same decisions, and every byte either counts is len() of a
// message this package encoded.
//
// A Node decides:
//
//   - batching, Nagle-style: an owner's write goes out at once when no
//     flush happened in the last BatchDelay; writes within BatchDelay of a
//     flush wait for that window's end and go out together, coalesced
//     (crdt.Coalesce) and packed into packets under the budget (PackDeltas);
//     a batch too big for one goes over a stream
//   - the mode: eager (straight to every member) up to EagerThreshold
//     members, epidemic (the piggyback queue, plus a few random members at
//     once) beyond; what is new to a receiver is relayed in epidemic mode
//   - peer liveness: leases refreshed by announcements and eager deltas,
//     memberlist's verdicts and when they are overruled, the
//     revival of a peer heard again only once this replica holds its writes
//   - repair: alive announcements of each origin's watermark, a pull when a
//     gap persists across two of them, answers to digests
//     (bounded in flight), rejoining members memberlist holds dead
//     or left that are heard from (a new incarnation, for one that left)
//   - leave and drain announcements
//
// The driving loop:
//
//	n, err := dissem.New(cfg, members, replica) // members: memberlist's list as
//	                                            // the driver knows it; replica: the
//	                                            // watermarks and session count it reads
//	n.Start(now, false)                         // timers from now
//	for {
//		select {                                // one input at a time, in order:
//		case deltas := <-writes:
//			n.Publish(deltas, now)              // an owner's writes
//		case b := <-inbound:
//			m, err := dissem.Decode(b)          // garbage is an error, never a panic
//			n.Step(m, now)
//		case ev := <-memberEvents:
//			n.MemberAlive(name, meta, now)      // or MemberFailed(name, left, now)
//		case <-timer:                           // at n.Deadline()
//			n.Tick(now)
//		}
//		for n.HasReady() {
//			rd := n.Ready()
//			// rd.Apply: merge deltas and syncs into the replica, mark
//			// gateways down or up, retire old incarnations, in order;
//			// rd.Sends (packets or streams), rd.Broadcasts (the piggyback
//			// queue), rd.Pulls and rd.Answers (digest and sync exchanges,
//			// then PullDone and AnswerDone), rd.Rejoin, rd.Forget, rd.Notes
//			n.Advance(now)                      // revivals the applied changes complete
//		}
//	}
//
// Files, one concern each:
//
//	node.go     the state machine: inputs, timers, every decision
//	ready.go    Ready, what a Node asks of its driver, and how it prints
//	plan.go     pure rules it uses: mode, packing, leases, gap detection, memberlist's formulas
//	wire.go     the wire format (one place: types, layout, limits, node metadata)
//	region.go   Regions: one cluster per region bridged over a WAN pool (the
//	            active bridge, forwarding once per region, region leases,
//	            repair), a state machine of its own beside a Node
//
// The scripts in testdata/dissem/core (from the module root) show a few nodes' Readys step by step
// (go test ./dissem -run TestScripts [-rewrite]); a property test checks
// that any delivery order and loss pattern ends converged once the network
// delivers again.
package dissem
