package crdt

import "testing"

// canonicalSnapshot encodes a replica's held records in one deterministic
// byte string: replicas that converged give equal bytes.
func canonicalSnapshot(r *Replica) []byte {
	ss, as := r.Snapshot()
	b, err := AppendSync(nil, Sync{{Origin: Origin{Node: "snapshot"}, Sessions: ss, Accounts: as, LastSeen: r.LastSeenSnapshot()}})
	if err != nil {
		panic(err)
	}
	return b
}

// newTestReplica returns a replica writing as node#inc with the given
// horizons (0 for the defaults).
func newTestReplica(t testing.TB, node string, inc uint64, cfg Config) *Replica {
	t.Helper()
	cfg.Self = Origin{Node: node, Incarnation: inc}
	r, err := NewReplica(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
