package gossip

import (
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/dissem"
)

// An incarnation up to the skew past this node's clock is taken (a peer
// whose clock runs a little ahead); one beyond it is refused.
func TestIncarnationSkewBound(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cfg := DefaultConfig()
	cfg.Name, cfg.Now = "n0", func() time.Time { return now }
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if cfg.MaxIncarnationSkew != time.Hour {
		t.Fatalf("default skew %v, want 1h", cfg.MaxIncarnationSkew)
	}
	c := &Cluster{cfg: cfg}
	for _, tc := range []struct {
		inc uint64
		ok  bool
	}{
		{1, true},
		{uint64(now.UnixNano()), true},
		{uint64(now.Add(time.Hour).UnixNano()), true},
		{uint64(now.Add(time.Hour).UnixNano()) + 1, false},
		{1 << 63, false},
		{^uint64(0), false},
	} {
		err := c.bounds().origin(crdt.Origin{Node: "n1", Incarnation: tc.inc})
		var re *refusedError
		if tc.ok != (err == nil) || (err != nil && (!errors.As(err, &re) || re.reason != refusedIncarnation)) {
			t.Errorf("incarnation %d: %v", tc.inc, err)
		}
	}
	c.cfg.MaxIncarnationSkew = time.Minute
	if err := c.bounds().origin(crdt.Origin{Node: "n1", Incarnation: uint64(now.Add(2 * time.Minute).UnixNano())}); err == nil {
		t.Error("an incarnation 2m ahead taken with a skew of 1m")
	}
}

// Refusals are logged once per reason per interval, the next line saying
// how many were not.
func TestRefusalLogIsRateLimited(t *testing.T) {
	var l refusalLog
	t0 := time.Unix(1000, 0)
	if _, ok := l.allow(refusedVersion, t0); !ok {
		t.Fatal("the first refusal not logged")
	}
	for i := range 5 {
		if _, ok := l.allow(refusedVersion, t0.Add(time.Duration(i)*time.Second)); ok {
			t.Fatal("a refusal logged within the interval")
		}
	}
	if _, ok := l.allow(refusedEpoch, t0); !ok {
		t.Fatal("another reason's first refusal not logged")
	}
	n, ok := l.allow(refusedVersion, t0.Add(refusalLogInterval))
	if !ok || n != 5 {
		t.Fatalf("after the interval: logged %v, %d not logged; want true, 5", ok, n)
	}
}

// BenchmarkScreen is the cost of the bounds checks on a received delta
// batch (one origin's 10 session writes) and on an alive announcement (its
// client address checked against the member's metadata).
func BenchmarkScreen(b *testing.B) {
	cfg := DefaultConfig()
	cfg.Name = "n0"
	if err := cfg.Validate(); err != nil {
		b.Fatal(err)
	}
	c := &Cluster{cfg: cfg, log: cfg.Logger}
	c.view = memberView{nodes: map[string]*memberlist.Node{}, addrs: map[string]memberlist.Address{}, state: map[string]string{}}
	o := crdt.Origin{Node: "n1", Incarnation: uint64(time.Now().UnixNano())}
	c.view.set(&memberlist.Node{Name: "n1", Meta: dissem.EncodeMeta(dissem.Meta{Incarnation: o.Incarnation, ClientAddr: "10.0.0.2:7400"})}, "alive")
	ds := make([]crdt.Delta, 10)
	for i := range ds {
		ds[i] = crdt.Delta{Since: uint64(i), Session: &crdt.Session{User: "u", Device: "d", ID: "i", Epoch: 5, Seq: 1,
			Gateway: "n1", Origin: o, Version: uint64(i + 1), Groups: []string{"g"}}}
	}
	deltas, err := dissem.NewDeltas(ds)
	if err != nil {
		b.Fatal(err)
	}
	alive, err := dissem.NewAlive(dissem.TypeAlive, dissem.Alive{Origin: o, Watermark: 10, Sessions: 3, ClientAddr: "10.0.0.2:7400"})
	if err != nil {
		b.Fatal(err)
	}
	for _, m := range []*dissem.Message{deltas, alive} {
		b.Run(m.Type.String(), func(b *testing.B) {
			for b.Loop() {
				if c.screen(m) == nil {
					b.Fatal("refused")
				}
			}
		})
	}
}
