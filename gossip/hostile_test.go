package gossip

// Hostile peers: tests that speak the gossip wire as an attacker would,
// against a small real cluster on loopback without a gossip key (anyone
// who reaches the gossip port can send any message). Each case sends what
// a hostile sender could, then checks that the victim's view is unchanged
// (the sessions of the other gateway still online, its updates still
// arriving) and that the refusal was counted.

import (
	"bytes"
	"math"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/dissem"
)

// hostileCluster is a two-gateway cluster, n0 (the victim) and n1, each
// with a client address, and alice online on n1.
type hostileCluster struct {
	*testCluster
	attacker net.Conn // UDP to n0's gossip port
}

const n1ClientAddr = "127.0.0.1:17401"

func newHostileCluster(t *testing.T) *hostileCluster {
	t.Helper()
	tc := newTestCluster(t, 2, func(c *Config) {
		c.ClientAddr = map[string]string{"n0": "127.0.0.1:17400", "n1": n1ClientAddr}[c.Name]
	})
	tc.waitMembers(2)
	tc.hosts[1].connect(t, "alice", "phone")
	waitFor(t, 5*time.Second, "alice online on n0", func() bool { return tc.hosts[0].presence("alice").Online })
	conn, err := net.Dial("udp", tc.addr(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &hostileCluster{testCluster: tc, attacker: conn}
}

// send sends a Rollcall gossip message to n0 in a UDP packet, framed as
// memberlist frames a user message.
func (hc *hostileCluster) send(msg []byte) {
	hc.t.Helper()
	if _, err := hc.attacker.Write(userPacket(msg)); err != nil {
		hc.t.Fatal(err)
	}
}

// refused returns how many values of reason n0 refused.
func (hc *hostileCluster) refused(reason refusal) uint64 {
	return hc.nodes[0].stats.refused[reason].Load()
}

// stillServing checks the victim's view: alice (on n1) online on n0, n1
// shown up, and a new session on n1 reaching n0.
func (hc *hostileCluster) stillServing(t *testing.T, user string) {
	t.Helper()
	if !hc.hosts[0].presence("alice").Online {
		t.Fatal("alice, online on n1, is shown offline on n0")
	}
	hc.hosts[1].connect(t, user, "laptop")
	waitFor(t, 10*time.Second, user+"'s new session on n1 shown on n0", func() bool {
		return hc.hosts[0].presence(user).Online
	})
	if !hc.hosts[0].presence("alice").Online {
		t.Fatal("alice, online on n1, is shown offline on n0")
	}
}

// n1Origin is n1's origin and the watermark n0 holds of it.
func (hc *hostileCluster) n1Origin() (crdt.Origin, uint64) {
	o := crdt.Origin{Node: "n1", Incarnation: 1}
	var w uint64
	hc.hosts[0].Do(func(r *crdt.Replica) { w = r.Watermark(o) })
	return o, w
}

// sendMsg sends an encoded message (send), failing the test on an
// encoding error.
func (hc *hostileCluster) sendMsg(b []byte, err error) {
	hc.t.Helper()
	if err != nil {
		hc.t.Fatal(err)
	}
	hc.send(b)
}

// forgeMemberAlive sends n0 memberlist's alive message for n1, at n1's
// own address and a memberlist incarnation above n1's, with meta as n1's
// metadata: memberlist takes it as n1's newest word.
func (hc *hostileCluster) forgeMemberAlive(meta dissem.Meta) {
	t := hc.t
	t.Helper()
	var n1 mlAlive
	for _, m := range hc.nodes[0].ml.Members() {
		if m.Name == "n1" {
			n1 = mlAlive{Incarnation: 1 << 30, Node: m.Name, Addr: m.Addr.To4(), Port: m.Port,
				Vsn: []uint8{m.PMin, m.PMax, m.PCur, m.DMin, m.DMax, m.DCur}}
		}
	}
	if n1.Node == "" {
		t.Fatal("n0 does not list n1")
	}
	n1.Meta = dissem.EncodeMeta(meta)
	var buf bytes.Buffer
	buf.WriteByte(4) // memberlist's aliveMsg
	if err := codec.NewEncoder(&buf, &codec.MsgpackHandle{}).Encode(&n1); err != nil {
		t.Fatal(err)
	}
	if _, err := hc.attacker.Write(buf.Bytes()); err != nil {
		t.Fatal(err)
	}
}

// A memberlist alive naming n1, at n1's own address, whose metadata gives
// the Rollcall incarnation 2^64-1: it retired every session of n1 on n0,
// for good.
func TestHostileForgedMemberAlive(t *testing.T) {
	hc := newHostileCluster(t)
	hc.forgeMemberAlive(dissem.Meta{Incarnation: math.MaxUint64, ClientAddr: n1ClientAddr})
	waitFor(t, 10*time.Second, "the forged alive refused, or taken", func() bool {
		return hc.refused(refusedIncarnation) > 0 || !hc.hosts[0].presence("alice").Online
	})
	hc.stillServing(t, "bob")
	if n := hc.refused(refusedIncarnation); n == 0 {
		t.Fatal("the forged incarnation was not counted")
	}
}

// A Rollcall alive announcement naming n1 with incarnation 2^64-1.
func TestHostileAliveWithHugeIncarnation(t *testing.T) {
	hc := newHostileCluster(t)
	_, w := hc.n1Origin()
	hc.sendMsg(dissem.EncodeAlive(dissem.Alive{Origin: crdt.Origin{Node: "n1", Incarnation: math.MaxUint64},
		Watermark: w, Sessions: 1, ClientAddr: n1ClientAddr}))
	waitFor(t, 10*time.Second, "the forged alive refused, or taken", func() bool {
		return hc.refused(refusedIncarnation) > 0 || !hc.hosts[0].presence("alice").Online
	})
	hc.stillServing(t, "bob")
}

// A delta in n1's name whose version is 2^64-1 covering everything below:
// n0's watermark of n1 jumped there, and every later write of n1 was
// taken for one already held.
func TestHostileDeltaWithHugeVersion(t *testing.T) {
	hc := newHostileCluster(t)
	o, _ := hc.n1Origin()
	s := &crdt.Session{User: "mallory", Device: "x", ID: "m", Epoch: 1, Seq: 1, Gateway: "n1",
		State: crdt.StateActive, Origin: o, Version: math.MaxUint64}
	hc.sendMsg(dissem.EncodeDeltas([]crdt.Delta{{Since: 0, Session: s}}))
	waitFor(t, 10*time.Second, "the forged delta refused, or taken", func() bool {
		_, w := hc.n1Origin()
		return hc.refused(refusedVersion) > 0 || w > maxPeerCounter
	})
	hc.stillServing(t, "bob")
	if hc.hosts[0].presence("mallory").Online {
		t.Fatal("the forged session is shown online")
	}
	if _, w := hc.n1Origin(); w > maxPeerCounter {
		t.Fatalf("n0's watermark of n1 is %d", w)
	}
}

// A delta in n1's name holding alice's device at epoch 2^64-1: no newer
// epoch exists, so the device could never open a session again.
func TestHostileDeltaWithHugeEpoch(t *testing.T) {
	hc := newHostileCluster(t)
	o, w := hc.n1Origin()
	k := crdt.Key{User: "alice", Device: "phone"}
	var before crdt.Session
	hc.hosts[0].Do(func(r *crdt.Replica) { before, _ = r.Session(k) })
	// Versions well above n1's, with a gap below: n1's own next writes
	// are not taken.
	s := &crdt.Session{User: "alice", Device: "phone", ID: "forged", Epoch: math.MaxUint64, Seq: 1, Gateway: "n1",
		State: crdt.StateActive, Origin: o, Version: w + 1000}
	hc.sendMsg(dissem.EncodeDeltas([]crdt.Delta{{Since: w + 999, Session: s}}))
	waitFor(t, 10*time.Second, "the forged delta refused, or taken", func() bool {
		var held uint64
		hc.hosts[0].Do(func(r *crdt.Replica) { held = r.MaxEpoch(k) })
		return hc.refused(refusedEpoch) > 0 || held > crdt.MaxIssuedEpoch
	})
	var after crdt.Session
	hc.hosts[0].Do(func(r *crdt.Replica) { after, _ = r.Session(k) })
	if after.Epoch != before.Epoch || after.ID != before.ID {
		t.Fatalf("n0 holds alice/phone at epoch %d (%s), not %d (%s)", after.Epoch, after.ID, before.Epoch, before.ID)
	}
	hc.stillServing(t, "bob")
}

// An anti-entropy answer in which one origin holds values out of bounds
// loses that origin only: the records of the others merge.
func TestHostileSyncRefusesOnlyTheBadOrigin(t *testing.T) {
	hc := newHostileCluster(t)
	good := crdt.Origin{Node: "carol-gw", Incarnation: 5}
	bad := crdt.Origin{Node: "n1", Incarnation: 1}
	sync := crdt.Sync{
		{Origin: bad, Watermark: math.MaxUint64},
		{Origin: good, Watermark: 1, Sessions: []crdt.Session{{User: "carol", Device: "d", ID: "c", Epoch: 1, Seq: 1,
			Gateway: good.Node, State: crdt.StateActive, Origin: good, Version: 1}}},
	}
	hc.sendMsg(dissem.EncodeSync(sync))
	waitFor(t, 10*time.Second, "carol's record merged on n0", func() bool {
		var ok bool
		hc.hosts[0].Do(func(r *crdt.Replica) { _, ok = r.Session(crdt.Key{User: "carol", Device: "d"}) })
		return ok
	})
	if n := hc.refused(refusedVersion); n == 0 {
		t.Fatal("the bad origin's watermark was not refused")
	}
	if _, w := hc.n1Origin(); w > maxPeerCounter {
		t.Fatalf("n0's watermark of n1 is %d", w)
	}
	hc.stillServing(t, "bob")
}

// A page of a paged snapshot whose drop range reaches 2^64-1 would have n0
// drop n1's records above any version n1 wrote: the origin is refused, the
// others merge.
func TestHostileSyncPageWithHugeDropRange(t *testing.T) {
	hc := newHostileCluster(t)
	good := crdt.Origin{Node: "carol-gw", Incarnation: 5}
	bad, _ := hc.n1Origin()
	sync := crdt.Sync{
		{Origin: bad, Full: true, Drop: &crdt.DropRange{After: 0, Through: math.MaxUint64}},
		{Origin: good, Watermark: 1, Sessions: []crdt.Session{{User: "carol", Device: "d", ID: "c", Epoch: 1, Seq: 1,
			Gateway: good.Node, State: crdt.StateActive, Origin: good, Version: 1}}},
	}
	hc.sendMsg(dissem.EncodeSyncPage(dissem.SyncPage{From: "n1", Last: true}, sync))
	waitFor(t, 10*time.Second, "carol's record merged on n0", func() bool {
		var ok bool
		hc.hosts[0].Do(func(r *crdt.Replica) { _, ok = r.Session(crdt.Key{User: "carol", Device: "d"}) })
		return ok
	})
	if n := hc.refused(refusedVersion); n == 0 {
		t.Fatal("the drop range was not refused")
	}
	hc.stillServing(t, "bob")
}

// Sessions under an origin no member has: they were shown online for ever,
// with no lease. They must be shown expired within the lease, like a
// silent member's, and purged by GC after the purge horizon.
func TestHostileInventedOrigin(t *testing.T) {
	hc := newHostileCluster(t)
	ghost := crdt.Origin{Node: "ghost", Incarnation: 7}
	sync := crdt.Sync{{Origin: ghost, Watermark: 1, Sessions: []crdt.Session{{User: "mallory", Device: "d", ID: "g",
		Epoch: 1, Seq: 1, Gateway: ghost.Node, State: crdt.StateActive, Origin: ghost, Version: 1}}}}
	expired := hc.nodes[0].stats.LeasesExpired.Load()
	hc.sendMsg(dissem.EncodeSync(sync))
	k := crdt.Key{User: "mallory", Device: "d"}
	waitFor(t, 10*time.Second, "the ghost's record merged on n0", func() bool {
		var ok bool
		hc.hosts[0].Do(func(r *crdt.Replica) { _, ok = r.Session(k) })
		return ok
	})
	// The lease is 2s in these tests.
	waitFor(t, 10*time.Second, "the ghost's session shown expired on n0", func() bool {
		return !hc.hosts[0].presence("mallory").Online
	})
	if hc.nodes[0].stats.LeasesExpired.Load() == expired {
		t.Fatal("the ghost's lease expiry was not counted")
	}
	if slices.ContainsFunc(hc.nodes[0].Members(), func(m Member) bool { return m.Name == "ghost" }) {
		t.Fatal("the ghost is listed as a member")
	}
	var held bool
	hc.hosts[0].Do(func(r *crdt.Replica) {
		r.GC(time.Now().Add(crdt.DefaultPurgeHorizon + time.Minute).UnixNano())
		_, held = r.Session(k)
	})
	if held {
		t.Fatal("GC past the purge horizon left the ghost's session")
	}
	hc.stillServing(t, "bob")
}

// An announcement of n1, its own incarnation, naming another client
// address: draining gateways send their clients, with their tokens, to
// the addresses of the other gateways.
func TestHostileSpoofedClientAddress(t *testing.T) {
	hc := newHostileCluster(t)
	o, w := hc.n1Origin()
	const evil = "203.0.113.66:7400"
	hc.sendMsg(dissem.EncodeAlive(dissem.Alive{Origin: o, Watermark: w, Sessions: 1, ClientAddr: evil}))
	waitFor(t, 10*time.Second, "the spoofed address refused, or taken", func() bool {
		return hc.refused(refusedClientAddr) > 0 || hc.nodes[0].ClientAddrOf("n1") == evil
	})
	if got := hc.nodes[0].OtherGateways(); !slices.Equal(got, []string{n1ClientAddr}) {
		t.Fatalf("n0's other gateways are %v, want [%s]", got, n1ClientAddr)
	}
	if got := hc.nodes[0].ClientAddrOf("n1"); got != n1ClientAddr {
		t.Fatalf("n0 says n1's client address is %q", got)
	}
	hc.stillServing(t, "bob")
}

// Garbage: random bytes, random bytes behind a Rollcall header, and
// msgpack of the wrong shape. Dropped and counted; nothing else changes.
func TestHostileGarbage(t *testing.T) {
	hc := newHostileCluster(t)
	bad := hc.nodes[0].stats.BadMessages.Load()
	rng := rand.New(rand.NewPCG(1, 2))
	junk := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.UintN(256))
		}
		return b
	}
	var sent int
	for typ := range dissem.MaxType + 1 {
		for _, n := range []int{0, 1, 7, 64, 900} {
			hc.send(append([]byte{dissem.WireVersion, byte(typ)}, junk(n)...))
			sent++
		}
		wrong, err := msgpack.Marshal([]any{"n1", -1, "x", []byte{1}})
		if err != nil {
			t.Fatal(err)
		}
		hc.send(append([]byte{dissem.WireVersion, byte(typ)}, wrong...))
		sent++
	}
	for range 20 {
		if _, err := hc.attacker.Write(junk(1 + rng.IntN(1200))); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 10*time.Second, "the garbage counted", func() bool {
		return hc.nodes[0].stats.BadMessages.Load()-bad >= uint64(sent)
	})
	hc.stillServing(t, "bob")
}

// A memberlist alive naming n1 with n1's own incarnation and another
// client address: n0 took it as n1's address until n1 refuted it.
func TestHostileForgedMemberClientAddress(t *testing.T) {
	hc := newHostileCluster(t)
	const evil = "203.0.113.66:7400"
	hc.forgeMemberAlive(dissem.Meta{Incarnation: 1, ClientAddr: evil})
	waitFor(t, 10*time.Second, "the spoofed address refused, or taken", func() bool {
		return hc.refused(refusedClientAddr) > 0 || hc.nodes[0].ClientAddrOf("n1") == evil
	})
	if got := hc.nodes[0].ClientAddrOf("n1"); got != n1ClientAddr {
		t.Fatalf("n0 says n1's client address is %q", got)
	}
	hc.stillServing(t, "bob")
}

// A last-seen write in n1's name at the end of time would win alice's
// register for ever: her real last seen would never show again.
func TestHostileLastSeenInTheFuture(t *testing.T) {
	hc := newHostileCluster(t)
	o, w := hc.n1Origin()
	forged := &crdt.LastSeen{User: "alice", At: math.MaxInt64, Origin: o, Version: w + 1000}
	hc.sendMsg(dissem.EncodeDeltas([]crdt.Delta{{Since: w + 999, LastSeen: forged}}))
	lastSeen := func() int64 {
		var at int64
		hc.hosts[0].Do(func(r *crdt.Replica) { at = r.LastSeen("alice", time.Now().UnixNano()) })
		return at
	}
	waitFor(t, 10*time.Second, "the forged last seen refused, or taken", func() bool {
		return hc.refused(refusedStamp) > 0 || lastSeen() == math.MaxInt64
	})
	// A session of alice's on n1 ends: n0 shows its time.
	end := time.Now().UnixNano()
	var d crdt.Delta
	var err error
	hc.hosts[1].Do(func(r *crdt.Replica) { d, err = r.PutLastSeen("alice", end) })
	if err != nil {
		t.Fatal(err)
	}
	hc.nodes[1].Publish([]crdt.Delta{d})
	waitFor(t, 10*time.Second, "alice's real last seen shown on n0", func() bool { return lastSeen() == end })
	hc.stillServing(t, "bob")
}

// An account record in n1's name stamped at the end of time: it won every
// merge for ever, so alice's own account settings never showed again.
func TestHostileAccountStampInTheFuture(t *testing.T) {
	hc := newHostileCluster(t)
	o, w := hc.n1Origin()
	forged := &crdt.Account{User: "alice", Override: crdt.OverrideDND, Writer: "n1", Origin: o, Version: w + 1000,
		Stamp: crdt.Timestamp{Wall: math.MaxInt64, Logical: math.MaxUint32}}
	hc.sendMsg(dissem.EncodeDeltas([]crdt.Delta{{Since: w + 999, Account: forged}}))
	override := func() crdt.Override {
		var a crdt.Account
		hc.hosts[0].Do(func(r *crdt.Replica) { a, _ = r.Account("alice") })
		return a.Override
	}
	waitFor(t, 10*time.Second, "the forged account refused, or taken", func() bool {
		return hc.refused(refusedStamp) > 0 || override() == crdt.OverrideDND
	})
	// alice sets her account on n1: n0 shows it.
	var d crdt.Delta
	var err error
	hc.hosts[1].Do(func(r *crdt.Replica) {
		d, err = r.PutAccountLocal("alice", crdt.OverrideAway, "", time.Now().UnixNano())
	})
	if err != nil {
		t.Fatal(err)
	}
	hc.nodes[1].Publish([]crdt.Delta{d})
	waitFor(t, 10*time.Second, "alice's own account setting shown on n0", func() bool { return override() == crdt.OverrideAway })
	hc.stillServing(t, "bob")
}

// Status text, emoji and session meta over their limits, in n1's name:
// each message is refused whole by n0's decoder (a gateway refuses them
// from its clients with bad_request; a peer may not write them either),
// and n0 shows none of it.
func TestHostileOverLongStatusFields(t *testing.T) {
	hc := newHostileCluster(t)
	o, w := hc.n1Origin()
	account := func(text, emoji string) crdt.Delta {
		return crdt.Delta{Since: w + 999, Account: &crdt.Account{User: "alice", Override: crdt.OverrideDND, Text: text, Emoji: emoji,
			Writer: "n1", Origin: o, Version: w + 1000, Stamp: crdt.Timestamp{Wall: time.Now().UnixNano()}}}
	}
	session := crdt.Delta{Since: w + 999, Session: &crdt.Session{User: "mallory", Device: "x", ID: "m", Epoch: 1, Seq: 1,
		Gateway: "n1", State: crdt.StateActive, Origin: o, Version: w + 1000,
		Meta: `{"k":"` + strings.Repeat("x", crdt.MaxMetaBytes) + `"}`}}
	bad := hc.nodes[0].stats.BadMessages.Load()
	for _, d := range []crdt.Delta{
		account(strings.Repeat("é", crdt.MaxStatusTextChars+1), ""),
		account("", strings.Repeat("🍔", crdt.MaxStatusEmojiBytes/4+1)),
		session,
	} {
		hc.sendMsg(dissem.EncodeDeltas([]crdt.Delta{d}))
	}
	waitFor(t, 10*time.Second, "the three messages refused", func() bool {
		return hc.nodes[0].stats.BadMessages.Load()-bad >= 3
	})
	hc.stillServing(t, "bob")
	var a crdt.Account
	hc.hosts[0].Do(func(r *crdt.Replica) { a, _ = r.Account("alice") })
	if a.Text != "" || a.Emoji != "" || a.Override != crdt.OverrideNone {
		t.Fatalf("n0 holds alice's account %+v", a)
	}
	if p := hc.hosts[0].presence("mallory"); p.Online {
		t.Fatalf("n0 shows mallory %+v", p)
	}
}
