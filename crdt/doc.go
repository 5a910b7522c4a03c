// Package crdt owns Rollcall's replicated presence state: the session map
// (last-writer-wins by epoch), per-user account records (last-writer-wins by
// hybrid logical clock), tombstones and their garbage collection, per-origin
// version digests for anti-entropy, the indexes queries need, and the pure
// aggregation of a user's sessions into one status.
//
// The package is pure. It starts no goroutines, performs no I/O and never reads
// the wall clock: time is always an argument. node/ and gossip/ drive it with
// real sockets and clocks; sim/ drives the very same code in virtual time.
// Nothing here is safe for concurrent use; the driver serialises access.
//
// # Replication model
//
// Every record is written by exactly one origin: the gateway incarnation that
// owns it (Origin{Node, Incarnation}). Each origin stamps its writes with a
// strictly increasing Version. A replica tracks, per origin, a watermark W:
// it holds every write of that origin with version <= W, or a record that
// dominates it, and the runs above W it already holds (received out of
// order). Digests are those; a peer answers a digest with the records in the
// gaps, so the cost of a sync follows the difference between replicas, not
// the total state.
//
// Session records merge by (Epoch, terminal, Seq, Gateway, ID): a total order,
// so merge is commutative, associative and idempotent. A lower epoch never
// overwrites a higher one, and a terminal record (disconnected or expired) of
// an epoch is never revived by an active record of the same or an older epoch.
//
// A gateway that restarts writes as a new incarnation. A replica that hears
// of it retires the older ones: their sessions stay as written (so merges keep
// the same winners everywhere) but show as expired, and GC collects them like
// tombstones. Account records of retired incarnations still merge.
//
// Tombstones are collected TombstoneHorizon after a replica first held them.
// The contract: no write arrives later than that unless anti-entropy has
// already covered it, and no new write of a key uses an epoch at or below one
// that may still be held anywhere (an epoch allocator that restarts from
// MaxEpoch after GC breaks this; see testdata/crdt/epoch_reuse_after_gc.txt). A
// replica that lags past another's GC floor gets a full snapshot of every
// origin from it.
//
// # Memory
//
// Every gateway holds every session of the cluster, so a replica holds its
// records compactly: a fixed-size record without Go pointers in a slab
// (whose first page grows from a few records, so the thousands of small
// replicas of a simulator cost little), its names interned (refcounted: a name goes with its last record) in one
// byte arena, its groups an interned set, its origin's log 16 bytes an
// item (records.go, names.go, groupsets.go). The collector has almost
// nothing to trace however large the replica. A replica copies what it
// takes from a delta, and Session values are built at its boundary: by
// queries, diffs and snapshots.
//
// The driving loop. node/ runs it over the wall clock: node.Node owns the
// replica and writes it (PutLocal), and gossip.Cluster carries out what the
// protocol core (dissem.Node) decides through the node's Host methods
// (Apply, ApplySync, SetNodeDown, SetNodeUp, Digest, Diff). gossip.ReplicaHost
// does the same for tests and sim/calibrate, and sim/ runs one replica per
// simulated node in virtual time. now is always Unix nanoseconds:
//
//	r, err := crdt.NewReplica(crdt.Config{Self: origin})
//	d, err := r.PutLocal(session, now)       // an owner's write: the Delta to disseminate
//	                                         // (PutAccountLocal for an account record)
//	changed, dropped, err := r.Apply(d, now) // a peer's delta: whether it changed the state, and
//	                                         // the users whose sessions a newer incarnation ended
//	dg := r.Digest()                         // anti-entropy: per origin, what I hold
//	s := peer.Diff(dg)                       // the peer answers with what I lack
//	users, err := r.ApplySync(s, now)        // the users whose presence changed
//	users = r.SetNodeDown(gateway, now)      // membership says a gateway failed: its sessions show expired
//	users = r.SetNodeUp(gateway)             // it was heard from again
//	st := r.GC(now)                          // node/, every GCInterval: tombstones past the
//	                                         // horizon, sessions of gateways down past the purge horizon
//
// ApplyVia is Apply with a cached origin lookup (the simulator applies every
// delta at thousands of replicas). The caller serialises all of these.
package crdt
