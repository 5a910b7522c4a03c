package webhook

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

func users(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("user%d", i)
	}
	return out
}

// TestNotifierMovesOnlyTheChangedMembersUsers: rendezvous hashing moves
// the users of a member that leaves, and only to the members left; and a
// member that joins only takes users.
func TestNotifierMovesOnlyTheChangedMembersUsers(t *testing.T) {
	all := []string{"g0", "g1", "g2", "g3"}
	count := map[string]int{}
	for _, u := range users(4000) {
		before := Notifier(u, all)
		count[before]++
		without := Notifier(u, []string{"g0", "g2", "g3"})
		if before != "g1" && without != before {
			t.Fatalf("%s moved from %s to %s when g1 left", u, before, without)
		}
		if without == "g1" {
			t.Fatalf("%s went to the member that left", u)
		}
		with := Notifier(u, append(slices.Clone(all), "g4"))
		if with != "g4" && with != before {
			t.Fatalf("%s moved from %s to %s when g4 joined", u, before, with)
		}
		// The order of the view does not matter.
		if Notifier(u, []string{"g3", "g1", "g0", "g2"}) != before {
			t.Fatalf("%s: the view's order changed its notifier", u)
		}
	}
	// Every member gets a share (a quarter each, give or take).
	for _, m := range all {
		if count[m] < 700 {
			t.Errorf("%s announces %d of 4000 users", m, count[m])
		}
	}
	if Notifier("alice", nil) != "" {
		t.Error("a notifier among no members")
	}
}

func TestHandoffAnnouncesForTheOldViewWithinTheWindow(t *testing.T) {
	at := func(s int) int64 { return int64(s) * int64(time.Second) }
	h := &Handoff{Self: "g0", Window: 10 * time.Second}
	if h.Notifier("u") != "g0" || !h.Responsible("u", 0) {
		t.Fatal("before any view, this gateway announces everyone")
	}
	if removed := h.Observe([]string{"g0", "g1", "g2"}, at(0)); removed != nil || !h.Settled(at(0)) {
		t.Fatalf("first view: removed %v, settled %v", removed, h.Settled(at(0)))
	}
	// A user of g1's, and one of g0's that g3 takes when it joins.
	var ofG1, toG3 string
	for _, u := range users(1000) {
		if ofG1 == "" && Notifier(u, []string{"g0", "g1", "g2"}) == "g1" && Notifier(u, []string{"g0", "g2", "g3"}) == "g0" {
			ofG1 = u
		}
		if toG3 == "" && Notifier(u, []string{"g0", "g1", "g2"}) == "g0" && Notifier(u, []string{"g0", "g1", "g2", "g3"}) == "g3" {
			toG3 = u
		}
	}
	if ofG1 == "" || toG3 == "" {
		t.Fatal("no users to test with")
	}
	if h.Responsible(ofG1, at(1)) || !h.Responsible(toG3, at(1)) {
		t.Fatal("responsibility before the changes")
	}
	// g3 joins: g0 still announces toG3 within the window, not after.
	h.Observe([]string{"g0", "g1", "g2", "g3"}, at(2))
	if !h.Responsible(toG3, at(11)) || h.Settled(at(11)) {
		t.Fatal("within the window the old view counts")
	}
	if h.Responsible(toG3, at(12)) || !h.Settled(at(12)) {
		t.Fatal("past the window the old view still counts")
	}
	// g1 fails: it is reported removed, and g0 takes ofG1 at once.
	removed := h.Observe([]string{"g0", "g2", "g3"}, at(20))
	if !slices.Equal(removed, []string{"g1"}) {
		t.Fatalf("removed %v", removed)
	}
	if !h.Responsible(ofG1, at(20)) || h.Notifier(ofG1) != "g0" {
		t.Fatal("the failed member's user has no new notifier")
	}
	// The same view again changes nothing.
	if removed := h.Observe([]string{"g3", "g2", "g0"}, at(21)); removed != nil {
		t.Fatalf("removed %v", removed)
	}
}

func TestShadowGivesBackTheFailedNotifiersEvents(t *testing.T) {
	s := NewShadow(4, 10*time.Second)
	ev := func(u string) *Event { return &Event{ID: "msg_" + u, User: u} }
	s.Add(ev("a"), "g1", 0)
	s.Add(ev("b"), "g2", 1)
	s.Add(ev("c"), "g1", int64(5*time.Second))
	mine := func(u string) bool { return u != "x" }
	// g1 fails at 12s: a is past the window, c is given back.
	got := s.Take([]string{"g1"}, int64(12*time.Second), mine)
	if len(got) != 1 || got[0].User != "c" {
		t.Fatalf("took %v", got)
	}
	if again := s.Take([]string{"g1"}, int64(12*time.Second), mine); len(again) != 0 {
		t.Fatalf("taken twice: %v", again)
	}
	// Only the events this gateway now announces.
	s.Add(ev("x"), "g2", int64(13*time.Second))
	got = s.Take([]string{"g2"}, int64(14*time.Second), mine)
	if len(got) != 0 {
		t.Fatalf("took %v (b is past the window, x is another's)", got)
	}
	// The ring overwrites, counting events pushed out within the window
	// (x, and the first two of these): not a, b (past it) or c (taken).
	for i := range 6 {
		s.Add(ev(fmt.Sprint(i)), "g3", int64(20*time.Second))
	}
	if s.Overwritten != 3 || s.Len() != 4 {
		t.Fatalf("overwritten %d, held %d", s.Overwritten, s.Len())
	}
}
