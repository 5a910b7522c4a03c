package gossip

import (
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/rollcall/rollcall/crdt"
)

// A member of an earlier version announces a delegate protocol maximum of
// 0 and refuses any message holding a last-seen record. While it is in the
// cluster, the others do not count themselves ready to write them; and an
// anti-entropy answer to it leaves them out while its watermarks still
// cover them, so it catches up on everything else.
func TestLegacyMemberGetsNoLastSeen(t *testing.T) {
	tc := &testCluster{t: t, net: NewFaultNetwork(1)}
	tc.opts = []func(*Config){func(c *Config) {
		legacy := c.Name == "old"
		c.Memberlist = func(mlc *memberlist.Config) {
			fastMemberlist(mlc)
			if legacy {
				mlc.DelegateProtocolMax = 0
			}
		}
	}}
	tc.run(2)
	tc.waitMembers(2)
	if !tc.nodes[0].LastSeenReady() || !tc.nodes[1].LastSeenReady() {
		t.Fatal("members of this version are not ready for last-seen records")
	}
	// n0 holds a last-seen write and a session it never published.
	var ls crdt.Delta
	var err error
	tc.hosts[0].Do(func(r *crdt.Replica) { ls, err = r.PutLastSeen("alice", time.Now().UnixNano()) })
	if err != nil {
		t.Fatal(err)
	}
	holdUnpublished(t, tc.hosts[0], 1)
	old := tc.start("old", 1)
	tc.waitMembers(3)
	waitFor(t, 30*time.Second, "n0 and n1 not ready while an earlier version is a member", func() bool {
		return !tc.nodes[0].LastSeenReady() && !tc.nodes[1].LastSeenReady()
	})
	var o crdt.Origin
	tc.hosts[0].Do(func(r *crdt.Replica) { o = r.Self() })
	var mark uint64
	tc.hosts[0].Do(func(r *crdt.Replica) { mark = r.Watermark(o) })
	waitFor(t, 30*time.Second, "the old member caught up with n0", func() bool {
		var w uint64
		var sessions int
		tc.hosts[old].Do(func(r *crdt.Replica) { w, sessions = r.Watermark(o), len(r.NodeSessions(o.Node)) })
		return w >= mark && sessions == 1
	})
	tc.hosts[old].Do(func(r *crdt.Replica) {
		if got := r.LastSeenSnapshot(); len(got) != 0 {
			t.Fatalf("the old member was sent last-seen records: %+v", got)
		}
	})
	// n1, of this version, got it.
	waitFor(t, 30*time.Second, "n1 holds the last seen", func() bool {
		var at int64
		tc.hosts[1].Do(func(r *crdt.Replica) { at = r.LastSeen("alice", time.Now().UnixNano()) })
		return at == ls.LastSeen.At
	})
	// Once the old member is gone, the others are ready again.
	tc.crash(old)
	waitFor(t, 30*time.Second, "ready once the old member is gone", func() bool {
		return tc.nodes[0].LastSeenReady() && tc.nodes[1].LastSeenReady()
	})
}
