package gossip

import (
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/rollcall/rollcall/crdt"
)

// holdUnpublished writes n active sessions into h's replica without
// publishing them: only anti-entropy can carry them to another member.
func holdUnpublished(t *testing.T, h *fakeHost, n int) {
	t.Helper()
	for i := range n {
		if _, err := h.Put(crdt.Session{User: fmt.Sprintf("user%05d", i), Device: "phone",
			ID: fmt.Sprintf("s%05d", i), Epoch: 1, State: crdt.StateActive, Groups: []string{"team"}}); err != nil {
			t.Fatal(err)
		}
	}
}

// A joining member is sent what it lacks a page at a time, never as one
// message holding the replica; it reports ready only once the last page
// is applied, and then holds every record its seed held.
func TestJoinerGetsTheStateInPagesAndIsReadyAtTheLast(t *testing.T) {
	const sessions, pageBytes = 3000, 8 << 10
	tc := &testCluster{t: t, net: NewFaultNetwork(5), opts: []func(*Config){func(c *Config) {
		c.SyncPageBytes = pageBytes
		c.Memberlist = func(mlc *memberlist.Config) {
			fastMemberlist(mlc)
			mlc.PushPullInterval = time.Hour // only the join's exchange
		}
	}}}
	tc.wrapHost = func(i int, h *fakeHost) Host {
		if i == 0 {
			return &slowDiffHost{fakeHost: h, delay: 5 * time.Millisecond}
		}
		return h
	}
	tc.run(1)
	holdUnpublished(t, tc.hosts[0], sessions)
	seed := tc.hosts[0].snapshot()

	late := tc.start("late", 1)
	stats := tc.nodes[late].Stats()
	waitFor(t, 10*time.Second, "a few pages", func() bool { return stats.SyncPagesReceived.Load() >= 3 })
	if ok, why := tc.nodes[late].Readiness(); ok {
		t.Fatalf("ready after %d pages of a transfer under way", stats.SyncPagesReceived.Load())
	} else if tc.nodes[late].IncomingTransfers() != 1 {
		t.Fatalf("%d transfers incoming, want 1 (%s)", tc.nodes[late].IncomingTransfers(), why)
	}
	select {
	case <-tc.nodes[late].Ready():
	case <-time.After(30 * time.Second):
		t.Fatalf("not ready after %d pages", stats.SyncPagesReceived.Load())
	}
	if got := tc.hosts[late].snapshot(); got != seed {
		t.Fatal("ready without every record its seed holds")
	}
	sent := tc.nodes[0].Stats()
	pages := sent.SyncPagesSent.Load()
	if min := sent.SyncBytesSent.Load() / (2 * pageBytes); pages < 10 || pages < min {
		t.Fatalf("%d pages for %d bytes at %d a page", pages, sent.SyncBytesSent.Load(), pageBytes)
	}
	if stats.TransfersDone.Load() != 1 || tc.nodes[late].IncomingTransfers() != 0 {
		t.Fatalf("transfers done %d, incoming %d", stats.TransfersDone.Load(), tc.nodes[late].IncomingTransfers())
	}
	for _, tr := range stats.Received() {
		if (tr.Type == "sync-page" || tr.Type == "sync") && tr.Messages > 0 && tr.Bytes/tr.Messages > 2*pageBytes {
			t.Fatalf("%s messages of %d bytes on average, page %d", tr.Type, tr.Bytes/tr.Messages, pageBytes)
		}
	}
}
