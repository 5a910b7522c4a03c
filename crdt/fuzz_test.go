package crdt

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// Fuzz targets for the three decoders. Each must never panic; whatever
// decodes must survive a round trip through the encoder unchanged; and
// whatever decodes must be safe to hand to a replica (its invariants hold
// afterwards, and it can still answer and apply digests and syncs).
//
// The seed corpus lives in testdata/fuzz/FuzzXxx. Regenerate its valid encodings with
// go test -run TestWriteFuzzSeeds -write-fuzz-seeds ./crdt.

var writeFuzzSeeds = flag.Bool("write-fuzz-seeds", false, "write the generated seed corpus to testdata/fuzz")

func FuzzDecodeDeltas(f *testing.F) {
	for _, b := range seedDeltas() {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ds, err := DecodeDeltas(b)
		if err != nil {
			return
		}
		enc, err := AppendDeltas(nil, ds)
		if err != nil {
			t.Fatalf("decoded deltas do not encode: %v", err)
		}
		again, err := DecodeDeltas(enc)
		if err != nil {
			t.Fatalf("re-encoded deltas do not decode: %v", err)
		}
		if !reflect.DeepEqual(ds, again) {
			t.Fatalf("round trip changed the deltas:\n%+v\n%+v", ds, again)
		}
		for i := range ds {
			if n := EncodedDeltaSize(&ds[i]); n <= 0 || n > len(enc) {
				t.Fatalf("EncodedDeltaSize %d of a delta in a %d-byte batch", n, len(enc))
			}
		}
		r := fuzzReplica(t)
		for _, d := range ds {
			if _, _, err := r.Apply(d, int64(time.Minute)); err != nil {
				t.Fatalf("a decoded (so validated) delta does not apply: %v", err)
			}
			checkFuzzReplica(t, r)
		}
		exercise(t, r)
	})
}

func FuzzDecodeDigest(f *testing.F) {
	for _, b := range seedDigests() {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		dg, err := DecodeDigest(b)
		if err != nil {
			return
		}
		enc, err := AppendDigest(nil, dg)
		if err != nil {
			t.Fatalf("decoded digest does not encode: %v", err)
		}
		again, err := DecodeDigest(enc)
		if err != nil {
			t.Fatalf("re-encoded digest does not decode: %v", err)
		}
		if !reflect.DeepEqual(dg, again) {
			t.Fatalf("round trip changed the digest:\n%+v\n%+v", dg, again)
		}
		// Any digest gets an answer that encodes, decodes and applies.
		r := fuzzReplica(t)
		sy := r.Diff(dg)
		wire, err := AppendSync(nil, sy)
		if err != nil {
			t.Fatalf("the answer to a digest does not encode: %v", err)
		}
		sy2, err := DecodeSync(wire)
		if err != nil {
			t.Fatalf("the answer to a digest does not decode: %v", err)
		}
		peer := newTestReplica(t, "peer", 1, Config{})
		if _, err := peer.ApplySync(sy2, int64(time.Minute)); err != nil {
			t.Fatalf("the answer to a digest does not apply: %v", err)
		}
		checkFuzzReplica(t, peer)
	})
}

func FuzzDecodeSync(f *testing.F) {
	for _, b := range seedSyncs() {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		sy, err := DecodeSync(b)
		if err != nil {
			return
		}
		enc, err := AppendSync(nil, sy)
		if err != nil {
			t.Fatalf("decoded sync does not encode: %v", err)
		}
		again, err := DecodeSync(enc)
		if err != nil {
			t.Fatalf("re-encoded sync does not decode: %v", err)
		}
		if !reflect.DeepEqual(sy, again) {
			t.Fatalf("round trip changed the sync:\n%+v\n%+v", sy, again)
		}
		for _, r := range []*Replica{newTestReplica(t, "fz", 1, Config{}), fuzzReplica(t)} {
			if _, err := r.ApplySync(sy, int64(time.Minute)); err != nil {
				t.Fatalf("a decoded (so validated) sync does not apply: %v", err)
			}
			checkFuzzReplica(t, r)
			exercise(t, r)
		}
	})
}

// fuzzReplica returns a replica holding a few records of its own and of
// other origins, so decoded input meets existing state.
func fuzzReplica(t testing.TB) *Replica {
	r, err := buildFuzzReplica()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func buildFuzzReplica() (*Replica, error) {
	r, err := NewReplica(Config{Self: Origin{Node: "fz", Incarnation: 1}, TombstoneHorizon: time.Minute, PurgeHorizon: 2 * time.Minute})
	if err != nil {
		return nil, err
	}
	for _, d := range seedHistory() {
		if _, _, err := r.Apply(d, 0); err != nil {
			return nil, err
		}
	}
	if _, err := r.PutLocal(Session{User: "u", Device: "fz", ID: "own", Epoch: 1, Groups: []string{"g"}}, 0); err != nil {
		return nil, err
	}
	return r, nil
}

func mustFuzzReplica() *Replica {
	r, err := buildFuzzReplica()
	if err != nil {
		panic(err)
	}
	return r
}

func checkFuzzReplica(t *testing.T, r *Replica) {
	t.Helper()
	if err := r.CheckInvariants(); err != nil {
		t.Fatalf("invariants: %v\n%s", err, dumpReplica(r))
	}
}

// exercise drives a replica that took decoded input through everything a
// driver does with it, checking invariants along the way.
func exercise(t *testing.T, r *Replica) {
	t.Helper()
	ss, _ := r.Snapshot()
	nodes := map[string]bool{}
	for i := range ss {
		r.Presence(ss[i].User, 0)
		r.UserSessions(ss[i].User)
		nodes[ss[i].Gateway] = true
		for _, g := range ss[i].Groups {
			r.GroupOnlineUsers(g)
		}
	}
	for n := range nodes {
		r.SetNodeDown(n, int64(2*time.Minute))
		r.NodeSessions(n)
	}
	checkFuzzReplica(t, r)
	peer := newTestReplica(t, "peer", 1, Config{})
	if _, err := peer.ApplySync(r.Diff(peer.Digest()), int64(2*time.Minute)); err != nil {
		t.Fatalf("a replica's answer does not apply: %v", err)
	}
	checkFuzzReplica(t, peer)
	r.GC(int64(5 * time.Minute))
	checkFuzzReplica(t, r)
	for n := range nodes {
		r.SetNodeUp(n)
	}
	checkFuzzReplica(t, r)
	r.Stats()
}

// seedHistory is a small, fixed history of three gateways: connects, a
// reconnect elsewhere, status and group changes, ends, accounts and a
// restart.
func seedHistory() []Delta {
	var out []Delta
	reps := map[string]*Replica{}
	rep := func(name string, inc uint64) *Replica {
		r, err := NewReplica(Config{Self: Origin{Node: name, Incarnation: inc}})
		if err != nil {
			panic(err)
		}
		reps[name] = r
		return r
	}
	put := func(r *Replica, s Session, now int64) {
		d, err := r.PutLocal(s, now)
		if err != nil {
			panic(err)
		}
		out = append(out, d)
	}
	a, b := rep("a", 1), rep("b", 1)
	put(a, Session{User: "u", Device: "phone", ID: "s1", Epoch: 1, Groups: []string{"all", "eng"}}, 1)
	put(a, Session{User: "u", Device: "phone", ID: "s1", Epoch: 1, Status: StatusAway, Groups: []string{"all", "eng"}}, 2)
	put(b, Session{User: "u", Device: "phone", ID: "s2", Epoch: 2, Groups: []string{"all"}}, 3)
	put(b, Session{User: "v", Device: "desk", ID: "s3", Epoch: 1, Status: StatusBusy}, 4)
	put(b, Session{User: "v", Device: "desk", ID: "s3", Epoch: 1, Status: StatusBusy, State: StateDisconnected}, 5)
	ls, err := b.PutLastSeen("v", 5)
	if err != nil {
		panic(err)
	}
	out = append(out, ls)
	d, err := a.PutAccountLocal("u", OverrideDND, "phone", 6)
	if err != nil {
		panic(err)
	}
	out = append(out, d)
	c := rep("c", 1)
	put(c, Session{User: "w", Device: "tab", ID: "s4", Epoch: 3, State: StateExpired}, 7)
	if ls, err = c.PutLastSeen("w", 7); err != nil {
		panic(err)
	}
	out = append(out, ls)
	a2 := rep("a", 2)
	put(a2, Session{User: "x", Device: "web", ID: "s5", Epoch: 1, Groups: []string{"ops"}}, 8)
	return out
}

func seedDeltas() [][]byte {
	h := seedHistory()
	var out [][]byte
	for i := range h {
		out = append(out, must(AppendDeltas(nil, h[i:i+1])))
	}
	out = append(out, must(AppendDeltas(nil, h)), must(AppendDeltas(nil, Coalesce(h[:5]))), must(AppendDeltas(nil, nil)))
	return append(out, garbage(out[0])...)
}

func seedDigests() [][]byte {
	r := mustFuzzReplica()
	out := [][]byte{
		must(AppendDigest(nil, r.Digest())),
		must(AppendDigest(nil, nil)),
		must(AppendDigest(nil, Digest{{Origin: Origin{Node: "a", Incarnation: 1}, Watermark: 1 << 63}})),
		must(AppendDigest(nil, Digest{{Origin: Origin{Node: "a", Incarnation: 1}, Watermark: 1,
			Held: []Span{{After: 2, Through: 3}, {After: 5, Through: 9}}}})),
	}
	return append(out, garbage(out[0])...)
}

func seedSyncs() [][]byte {
	r := mustFuzzReplica()
	r.GC(int64(10 * time.Minute))
	full := r.Diff(Digest{})
	for i := range full {
		full[i].Full = true
	}
	// Pages of a paged snapshot: drop ranges with the runs they keep,
	// and Full entries that drop nothing.
	dropPass, fullPass := r.Diff(Digest{}), r.Diff(Digest{})
	for i := range dropPass {
		w := dropPass[i].Watermark
		dropPass[i] = OriginSync{Origin: dropPass[i].Origin, Full: true, Drop: &DropRange{Through: w}}
		if w > 1 {
			dropPass[i].Drop.Keep = []Span{{After: 0, Through: 1}, {After: w - 1, Through: w}}
		}
		fullPass[i].Full, fullPass[i].Drop = true, &DropRange{}
	}
	out := [][]byte{
		must(AppendSync(nil, r.Diff(nil))),
		must(AppendSync(nil, full)),
		must(AppendSync(nil, r.Diff(Digest{{Origin: Origin{Node: "b", Incarnation: 1}, Watermark: 2}}))),
		must(AppendSync(nil, nil)),
		must(AppendSync(nil, dropPass)),
		must(AppendSync(nil, fullPass)),
	}
	return append(out, garbage(out[0])...)
}

// garbage derives malformed inputs from a valid one: truncations, flipped
// bytes, lying lengths and wrong types.
func garbage(valid []byte) [][]byte {
	out := [][]byte{
		{},
		{0xc0},                         // nil
		{0xdd, 0xff, 0xff, 0xff, 0xff}, // array32 of 4G elements, no body
		{0x91, 0xdb, 0xff, 0xff, 0xff, 0xff, 'x'},                                // str32 claiming 4 GiB
		{0x91, 0x93, 0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00}, // since = max uint64
		{0x9f, 0x9f, 0x9f, 0x9f, 0x9f, 0x9f, 0x9f, 0x9f},                         // nested fixarrays
		[]byte("not msgpack at all"),
	}
	if len(valid) > 4 {
		out = append(out, valid[:len(valid)/2], valid[:len(valid)-1])
		flipped := append([]byte(nil), valid...)
		flipped[len(flipped)/3] ^= 0xff
		out = append(out, flipped, append(append([]byte(nil), valid...), 0x00))
	}
	return out
}

// TestWriteFuzzSeeds writes the generated seeds to testdata/fuzz in the
// corpus file format, beside any crashers found by fuzzing. It runs only
// with -write-fuzz-seeds.
func TestWriteFuzzSeeds(t *testing.T) {
	if !*writeFuzzSeeds {
		t.Skip("run with -write-fuzz-seeds to regenerate the seed corpus")
	}
	for name, seeds := range map[string][][]byte{
		"FuzzDecodeDeltas": seedDeltas(),
		"FuzzDecodeDigest": seedDigests(),
		"FuzzDecodeSync":   seedSyncs(),
	} {
		dir := filepath.Join("testdata", "fuzz", name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for i, b := range seeds {
			text := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", b)
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%02d", i)), []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestFuzzSeedsValid: the generated seeds meant to be valid decode, so the
// fuzzers start from inputs that reach the replica.
func TestFuzzSeedsValid(t *testing.T) {
	h := seedHistory()
	for i, b := range seedDeltas()[:len(h)+3] {
		if _, err := DecodeDeltas(b); err != nil {
			t.Errorf("delta seed %d: %v", i, err)
		}
	}
	for i, b := range seedDigests()[:3] {
		if _, err := DecodeDigest(b); err != nil {
			t.Errorf("digest seed %d: %v", i, err)
		}
	}
	for i, b := range seedSyncs()[:4] {
		sy, err := DecodeSync(b)
		if err != nil {
			t.Errorf("sync seed %d: %v", i, err)
		}
		if i < 3 && sy.Len() == 0 {
			t.Errorf("sync seed %d holds no records", i)
		}
	}
}
