package crdt

import (
	"fmt"
	"testing"

	"pgregory.net/rapid"
)

// TestNameTableMatchesModel interns, stores and releases names at random
// against a map of reference counts: every held name reads back as
// written and is found by hash while interned, a name goes with its last
// reference, and the arena is rewritten (ids kept) once most of it is
// garbage.
func TestNameTableMatchesModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		nt := newNameTable()
		type held struct {
			s        string
			refs     int
			interned bool
		}
		model := map[nameID]*held{}
		byName := map[string]nameID{}
		var ids []nameID
		for range rapid.IntRange(0, 400).Draw(t, "steps") {
			switch op := rapid.IntRange(0, 3).Draw(t, "op"); {
			case op <= 1 || len(ids) == 0:
				s := fmt.Sprintf("n%d", rapid.IntRange(0, 30).Draw(t, "name"))
				if op == 1 { // a session ID: stored, never shared
					s = fmt.Sprintf("id%d-%s", len(ids), s)
					id := nt.store(s)
					if model[id] != nil {
						t.Fatalf("store(%q) returned held id %d", s, id)
					}
					model[id] = &held{s: s, refs: 1}
					ids = append(ids, id)
					continue
				}
				id := nt.intern(s)
				if want, ok := byName[s]; ok && want != id {
					t.Fatalf("intern(%q) = %d, held as %d", s, id, want)
				}
				if model[id] == nil {
					model[id] = &held{s: s, interned: true}
					byName[s] = id
				}
				model[id].refs++
				ids = append(ids, id)
			default:
				i := rapid.IntRange(0, len(ids)-1).Draw(t, "which")
				id := ids[i]
				ids = append(ids[:i], ids[i+1:]...)
				nt.release(id)
				h := model[id]
				if h.refs--; h.refs == 0 {
					delete(model, id)
					if h.interned {
						delete(byName, h.s)
					}
				}
			}
			if nt.held() != len(model) || nt.interned != len(byName) {
				t.Fatalf("table holds %d names (%d interned), model %d (%d)", nt.held(), nt.interned, len(model), len(byName))
			}
			for id, h := range model {
				if got := nt.str(id); got != h.s || int(nt.recs[id].refs) != h.refs {
					t.Fatalf("name %d reads %q with %d refs, want %q with %d", id, got, nt.recs[id].refs, h.s, h.refs)
				}
			}
			for s, id := range byName {
				if got := nt.lookup(s); got != id {
					t.Fatalf("lookup(%q) = %d, want %d", s, got, id)
				}
			}
			if nt.lookup("absent") != 0 {
				t.Fatal("lookup of a name never interned found one")
			}
		}
		for _, id := range ids {
			nt.release(id)
		}
		if nt.held() != 0 || nt.interned != 0 || len(nt.arena) != 0 {
			t.Fatalf("all released: %d names, %d interned, %d arena bytes", nt.held(), nt.interned, len(nt.arena))
		}
	})
}

// TestNameTableCompacts churns unique names through the table: the arena
// stays within a bound of what is held rather than growing with what was
// ever written, and held names keep their ids and bytes across rewrites.
func TestNameTableCompacts(t *testing.T) {
	nt := newNameTable()
	keep := nt.intern("kept-across-rewrites")
	const live = 100
	var window []nameID
	for i := range 200_000 {
		window = append(window, nt.store(fmt.Sprintf("session-%08d", i)))
		if len(window) > live {
			nt.release(window[0])
			window = window[1:]
		}
	}
	if got := nt.str(keep); got != "kept-across-rewrites" || nt.lookup(got) != keep {
		t.Fatalf("kept name reads %q, found as %d", got, nt.lookup(got))
	}
	for i, id := range window {
		if want := fmt.Sprintf("session-%08d", 200_000-live+i); nt.str(id) != want {
			t.Fatalf("name %d reads %q, want %q", id, nt.str(id), want)
		}
	}
	if max := 2*nameArenaMinGarbage + 64*live; len(nt.arena) > max {
		t.Fatalf("arena of %d bytes after churn (at most %d expected)", len(nt.arena), max)
	}
	if len(nt.recs) > 2*live {
		t.Fatalf("%d name records for %d held: released ids are not reused", len(nt.recs), nt.held())
	}
}

// TestChurnedNamesReleased: a replica whose users, devices, session IDs and
// groups come and go ends up holding no name or group set once their
// records are collected, and the names of live records only.
func TestChurnedNamesReleased(t *testing.T) {
	gw := newTestReplica(t, "gw", 1, Config{})
	obs := newTestReplica(t, "obs", 1, Config{})
	obs.GroupOnlineCount("g") // with a group index
	now := int64(1)
	for i := range 500 {
		s := Session{User: fmt.Sprintf("u%d", i), Device: fmt.Sprintf("d%d", i), ID: fmt.Sprintf("s%d", i), Epoch: 1,
			State: StateActive, Groups: []string{fmt.Sprintf("g%d", i), "all"}}
		for _, st := range []State{StateActive, StateDisconnected} {
			s.State = st
			d, err := gw.PutLocal(s, now)
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := obs.Apply(d, now); err != nil {
				t.Fatal(err)
			}
		}
	}
	d, err := gw.PutLocal(Session{User: "stay", Device: "phone", ID: "s-stay", Epoch: 1, State: StateActive,
		Groups: []string{"all"}}, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := obs.Apply(d, now); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*Replica{gw, obs} {
		if err := r.CheckInvariants(); err != nil {
			t.Fatal(err)
		}
		if r.names.held() < 1000 {
			t.Fatalf("%s holds %d names before GC", r.Self(), r.names.held())
		}
		r.GC(now + int64(r.Config().TombstoneHorizon))
		if err := r.CheckInvariants(); err != nil {
			t.Fatal(err)
		}
		// stay, phone, s-stay and all; the set {all}
		if r.names.held() != 4 || r.sets.held() != 1 || r.Stats().Sessions != 1 {
			t.Fatalf("%s after GC holds %d names, %d group sets, %d sessions; want 4, 1, 1",
				r.Self(), r.names.held(), r.sets.held(), r.Stats().Sessions)
		}
	}
	if n := obs.GroupOnlineCount("all"); n != 1 {
		t.Fatalf("group all has %d users online, want 1", n)
	}
	if n := obs.GroupOnlineCount("g7"); n != 0 {
		t.Fatalf("collected group g7 has %d users online", n)
	}
}
