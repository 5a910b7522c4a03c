package dissem

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/rollcall/rollcall/crdt"
)

// listView is a Members and Lister of many listed peers (beyond the eager
// threshold: tree mode, where memberlist's verdicts, not leases, mark
// members down), and a Replica holding nothing.
type listView struct{ names []string }

func (v *listView) NumMembers() int              { return len(v.names) + 1 }
func (v *listView) NumPeers() int                { return len(v.names) }
func (v *listView) Peer(i int) string            { return v.names[i] }
func (v *listView) Incarnation(string) uint64    { return 0 }
func (v *listView) Listed(name string) bool      { return slices.Contains(v.names, name) }
func (v *listView) Watermark(crdt.Origin) uint64 { return 0 }
func (v *listView) SessionCount() int            { return 0 }

// marked returns the nodes a Ready marks down.
func marked(rd *Ready) []string {
	var out []string
	for _, a := range rd.Apply {
		if a.Kind == MarkDown {
			out = append(out, a.Node)
		}
	}
	return out
}

// The records of a node no member list holds (a name a hostile sender made
// up) are leased in every mode: shown expired once the lease passes, like
// a silent member's in eager mode. A listed member whose records arrive
// the same way is left to memberlist's verdicts in tree mode.
func TestStrangersAreLeasedInEveryMode(t *testing.T) {
	v := &listView{}
	for i := range 100 {
		v.names = append(v.names, "m"+string(rune('a'+i%26))+string(rune('a'+i/26)))
	}
	cfg := DefaultConfig()
	cfg.Name, cfg.Incarnation, cfg.Rand = "self", 1, rand.New(rand.NewPCG(1, 2))
	cfg.Relay = RelayTree
	n, err := New(cfg, v, v)
	if err != nil {
		t.Fatal(err)
	}
	if n.Mode() != ModeTree {
		t.Fatalf("mode %v, want tree", n.Mode())
	}
	now := int64(1_700_000_000_000_000_000)
	n.Start(now, false)
	session := func(o crdt.Origin) crdt.Session {
		return crdt.Session{User: "u-" + o.Node, Device: "d", ID: "i", Epoch: 1, Seq: 1, Gateway: o.Node,
			State: crdt.StateActive, Origin: o, Version: 1}
	}
	ghost, member := crdt.Origin{Node: "ghost", Incarnation: 5}, crdt.Origin{Node: v.names[0], Incarnation: 5}
	m, err := NewSync(crdt.Sync{
		{Origin: ghost, Watermark: 1, Sessions: []crdt.Session{session(ghost)}},
		{Origin: member, Watermark: 1, Sessions: []crdt.Session{session(member)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	n.Step(m, now)
	var down []string
	for end := now + int64(3*cfg.LeaseTimeout); now < end; now = n.Deadline() {
		n.Tick(now)
		for n.HasReady() {
			down = append(down, marked(n.Ready())...)
			n.Advance(now)
		}
		if len(down) > 0 {
			break
		}
	}
	if !slices.Equal(down, []string{"ghost"}) {
		t.Fatalf("marked down %v, want [ghost]", down)
	}
	if elapsed := time.Duration(now - 1_700_000_000_000_000_000); elapsed > cfg.LeaseTimeout+2*LeaseTick(cfg.LeaseTimeout) {
		t.Fatalf("the stranger was marked down after %v; its lease is %v", elapsed, cfg.LeaseTimeout)
	}
	if p, _ := n.Peer("ghost"); !p.ShownDown || p.Listed {
		t.Fatalf("ghost: %+v", p)
	}
}

// A gateway of another region (SetRemote) is no stranger: its records,
// which a sync inside this region brings, are never leased here (the
// region's own lease, Regions, shows them expired).
func TestRemoteGatewaysAreNotLeased(t *testing.T) {
	v := &listView{names: []string{"peer"}}
	cfg := DefaultConfig()
	cfg.Name, cfg.Incarnation, cfg.Rand = "self", 1, rand.New(rand.NewPCG(1, 2))
	n, err := New(cfg, v, v)
	if err != nil {
		t.Fatal(err)
	}
	now := int64(1_700_000_000_000_000_000)
	n.Start(now, false)
	far, ghost := crdt.Origin{Node: "far", Incarnation: 5}, crdt.Origin{Node: "ghost", Incarnation: 5}
	session := func(o crdt.Origin) crdt.Session {
		return crdt.Session{User: "u-" + o.Node, Device: "d", ID: "i", Epoch: 1, Seq: 1, Gateway: o.Node,
			State: crdt.StateActive, Origin: o, Version: 1}
	}
	n.SetRemote("far")
	m, err := NewSync(crdt.Sync{
		{Origin: far, Watermark: 1, Sessions: []crdt.Session{session(far)}},
		{Origin: ghost, Watermark: 1, Sessions: []crdt.Session{session(ghost)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	n.Step(m, now)
	var down []string
	for end := now + int64(3*cfg.LeaseTimeout); now < end; now = n.Deadline() {
		n.Tick(now)
		for n.HasReady() {
			down = append(down, marked(n.Ready())...)
			n.Advance(now)
		}
	}
	if slices.Contains(down, "far") || !slices.Contains(down, "ghost") {
		t.Errorf("marked down %v: want the stranger ghost, not the remote far", down)
	}
	if !n.Remote("far") {
		t.Error("far not remote")
	}
}
