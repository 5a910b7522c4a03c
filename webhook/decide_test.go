package webhook

import (
	"encoding/json"
	"testing"

	"github.com/rollcall/rollcall/crdt"
)

// rec is an active session record of alice.
func rec(device, id string, epoch, seq uint64, gw string, updated int64) crdt.Session {
	return crdt.Session{User: "alice", Device: device, ID: id, Epoch: epoch, Seq: seq, Gateway: gw,
		State: crdt.StateActive, Updated: updated}
}

// observe builds an observation of alice from her records, aggregated
// as the replica does.
func observe(acct *crdt.Account, now int64, down map[string]bool, recs ...crdt.Session) Observation {
	var active []*crdt.Session
	for i := range recs {
		active = append(active, &recs[i])
	}
	return Observation{Presence: crdt.Aggregate("alice", active, acct, now), Records: recs, Account: acct,
		GatewayDown: func(g string) bool { return down[g] }, Now: now}
}

func body(t *testing.T, ev *Event) Body {
	t.Helper()
	var b Body
	if err := json.Unmarshal(ev.Body, &b); err != nil {
		t.Fatal(err)
	}
	return b
}

func ended(s crdt.Session, st crdt.State, updated int64) crdt.Session {
	s.State, s.Updated = st, updated
	s.Seq++
	return s
}

func TestDecideOnlineStatusOffline(t *testing.T) {
	phone := rec("phone", "s1", 1, 1, "g1", 100)
	ev, last := Decide(Last{}, observe(nil, 150, nil, phone))
	if ev == nil || ev.Type != UserOnline || ev.Time != 100 || !last.Online || last.Opened.Session != "s1" {
		t.Fatalf("online: %+v %+v", ev, last)
	}
	b := body(t, ev)
	if b.Type != "user.online" || b.Data.User != "alice" || b.Data.Status != "available" || len(b.Data.Sessions) != 1 ||
		b.Data.Sessions[0].Gateway != "g1" || b.Timestamp != "1970-01-01T00:00:00.0000001Z" {
		t.Fatalf("online body %s", ev.Body)
	}
	onlineID := ev.ID

	// A second device: no event, and the id of what follows still
	// derives from the session that opened the period.
	laptop := rec("laptop", "s2", 4, 1, "g2", 200)
	if ev, last = Decide(last, observe(nil, 250, nil, phone, laptop)); ev != nil {
		t.Fatalf("a second session made %s", ev.Body)
	}
	// Both away: user.status.
	phone.Status, phone.Seq, phone.Updated = crdt.StatusAway, 2, 300
	laptop.Status, laptop.Seq, laptop.Updated = crdt.StatusAway, 2, 310
	ev, last = Decide(last, observe(nil, 350, nil, phone, laptop))
	if ev == nil || ev.Type != UserStatus || ev.Time != 310 || body(t, ev).Data.Status != "away" {
		t.Fatalf("status: %+v", ev)
	}
	away1 := ev.ID
	// Back to available and away again: a new id each time.
	phone.Status, phone.Seq = crdt.StatusAvailable, 3
	ev, last = Decide(last, observe(nil, 400, nil, phone, laptop))
	if ev == nil || ev.ID == away1 || body(t, ev).Data.Status != "available" {
		t.Fatalf("available again: %+v", ev)
	}
	phone.Status, phone.Seq = crdt.StatusAway, 4
	ev, last = Decide(last, observe(nil, 400, nil, phone, laptop))
	if ev == nil || ev.ID == away1 {
		t.Fatalf("away again has the first away's id: %+v", ev)
	}
	// The phone disconnects (laptop stays): nothing.
	if ev, last = Decide(last, observe(nil, 500, nil, ended(phone, crdt.StateDisconnected, 500), laptop)); ev != nil {
		t.Fatalf("one of two sessions ending made %s", ev.Body)
	}
	// The laptop's gateway fails.
	lt := laptop
	lt.State = crdt.StateExpired // as projected
	ev, last = Decide(last, observe(nil, 900, map[string]bool{"g2": true}, ended(phone, crdt.StateDisconnected, 500), lt))
	if ev == nil || ev.Type != UserOffline || last.Online || ev.Time != 900 {
		t.Fatalf("offline: %+v %+v", ev, last)
	}
	b = body(t, ev)
	if b.Data.Reason != "gateway_failed" || b.Data.Status != "offline" || len(b.Data.Sessions) != 1 || b.Data.Sessions[0].Device != "laptop" {
		t.Fatalf("offline body %s", ev.Body)
	}
	if ev.ID == onlineID {
		t.Fatal("offline has the online's id")
	}
	// Offline stays offline: nothing.
	if ev, _ := Decide(last, observe(nil, 950, nil)); ev != nil {
		t.Fatalf("offline to offline made %s", ev.Body)
	}
}

func TestDecideOfflineReasons(t *testing.T) {
	phone := rec("phone", "s1", 1, 1, "g1", 100)
	_, online := Decide(Last{}, observe(nil, 100, nil, phone))
	expired := phone
	expired.State = crdt.StateExpired // shown expired, gateway up: it wrote it
	cases := []struct {
		name string
		ob   Observation
		want string
	}{
		{"bye", observe(nil, 300, nil, ended(phone, crdt.StateDisconnected, 200)), "disconnected"},
		{"timeout", observe(nil, 300, nil, ended(phone, crdt.StateExpired, 200)), "expired"},
		{"gateway shown down", observe(nil, 300, map[string]bool{"g1": true}, expired), "gateway_failed"},
		{"record dropped", observe(nil, 300, nil), "gateway_failed"},
		{"a later epoch came and went", observe(nil, 300, nil, ended(rec("phone", "s9", 2, 1, "g3", 250), crdt.StateDisconnected, 260)), "disconnected"},
	}
	var ids []string
	for _, c := range cases {
		ev, _ := Decide(online, c.ob)
		if ev == nil || ev.Type != UserOffline {
			t.Fatalf("%s: %+v", c.name, ev)
		}
		if r := body(t, ev).Data.Reason; r != c.want {
			t.Errorf("%s: reason %s, want %s", c.name, r, c.want)
		}
		ids = append(ids, ev.ID)
	}
	// However it ended, the end of the period is one change: one id.
	for _, id := range ids[1:] {
		if id != ids[0] {
			t.Fatalf("offline ids differ: %v", ids)
		}
	}
}

// TestDecideSameStateSameID: gateways that saw the same state decide the
// same ids and bodies, whatever steps each saw on the way (a gateway that
// coalesced two changes into one look).
func TestDecideSameStateSameID(t *testing.T) {
	phone := rec("phone", "s1", 1, 1, "g1", 100)
	laptop := rec("laptop", "s2", 1, 1, "g2", 200)
	// Gateway A sees the phone, then both.
	evA, lastA := Decide(Last{}, observe(nil, 0, nil, phone))
	_, lastA = Decide(lastA, observe(nil, 0, nil, phone, laptop))
	// Gateway B sees only the phone's first state and then both, too,
	// but its clock differs: ids do not depend on it.
	evB, lastB := Decide(Last{}, observe(nil, 999, nil, phone))
	_, lastB = Decide(lastB, observe(nil, 999, nil, phone, laptop))
	if evA.ID != evB.ID || string(evA.Body) != string(evB.Body) {
		t.Fatalf("online differs: %s %s / %s %s", evA.ID, evA.Body, evB.ID, evB.Body)
	}
	acct := &crdt.Account{User: "alice", Override: crdt.OverrideDND, Text: "busy", Stamp: crdt.Timestamp{Wall: 300}, Writer: "g1"}
	sA, _ := Decide(lastA, observe(acct, 0, nil, phone, laptop))
	sB, _ := Decide(lastB, observe(acct, 5, nil, phone, laptop))
	if sA == nil || sA.ID != sB.ID || string(sA.Body) != string(sB.Body) || body(t, sA).Data.Text != "busy" {
		t.Fatalf("status differs: %+v / %+v", sA, sB)
	}
}

// TestDecideRevival: a session shown expired because its gateway was
// shown down, then shown active again (a false suspicion, a healed
// partition), is announced online again under a new id, and its next end
// under a new id too.
func TestDecideRevival(t *testing.T) {
	phone := rec("phone", "s1", 1, 1, "g1", 100)
	down := phone
	down.State = crdt.StateExpired
	on1, last := Decide(Last{}, observe(nil, 100, nil, phone))
	off1, last := Decide(last, observe(nil, 200, map[string]bool{"g1": true}, down))
	if off1 == nil || body(t, off1).Data.Reason != "gateway_failed" || last.Opened.Session != "s1" {
		t.Fatalf("failed: %+v %+v", off1, last)
	}
	// Still shown down: nothing, and the user is still remembered.
	if ev, l := Decide(last, observe(nil, 250, map[string]bool{"g1": true}, down)); ev != nil || l.Opened.Session != "s1" {
		t.Fatalf("still down: %+v %+v", ev, l)
	}
	on2, last := Decide(last, observe(nil, 300, nil, phone))
	if on2 == nil || on2.Type != UserOnline || on2.ID == on1.ID || last.Revivals != 1 {
		t.Fatalf("revived: %+v (first online %s), %+v", on2, on1.ID, last)
	}
	off2, last := Decide(last, observe(nil, 400, nil, ended(phone, crdt.StateDisconnected, 400)))
	if off2 == nil || off2.ID == off1.ID || body(t, off2).Data.Reason != "disconnected" {
		t.Fatalf("second end: %+v", off2)
	}
	if last.Opened.Session != "" {
		t.Fatalf("a clean end is remembered: %+v", last)
	}
	// A failed gateway's user whose record is gone is forgotten.
	_, last = Decide(Last{}, observe(nil, 100, nil, phone))
	_, last = Decide(last, observe(nil, 200, map[string]bool{"g1": true}, down))
	if _, l := Decide(last, observe(nil, 300, nil)); l.Opened.Session != "" {
		t.Fatalf("purged user remembered: %+v", l)
	}
}

// An event names the gateway whose write made the change: the opening
// session's for user.online, the latest write's for user.status (a
// session's or the account's), the session that ended last for
// user.offline. Every gateway that observes the same state names the same
// one (a multi-region cluster sends the event from its region only).
func TestDecideNamesTheChangingGateway(t *testing.T) {
	phone := rec("phone", "s1", 1, 1, "eu0", 100)
	ev, last := Decide(Last{}, observe(nil, 150, nil, phone))
	if ev == nil || ev.Gateway != "eu0" {
		t.Fatalf("online: %+v", ev)
	}
	laptop := rec("laptop", "s2", 1, 1, "us1", 200)
	_, last = Decide(last, observe(nil, 250, nil, phone, laptop))
	phone.Status, phone.Seq, phone.Updated = crdt.StatusAway, 2, 290
	laptop.Status, laptop.Seq, laptop.Updated = crdt.StatusAway, 2, 300
	ev, last = Decide(last, observe(nil, 350, nil, phone, laptop))
	if ev == nil || ev.Type != UserStatus || ev.Gateway != "us1" {
		t.Fatalf("status from the laptop: %+v", ev)
	}
	acct := &crdt.Account{User: "alice", Text: "lunch", Stamp: crdt.Timestamp{Wall: 400}, Writer: "eu2"}
	ev, last = Decide(last, observe(acct, 450, nil, phone, laptop))
	if ev == nil || ev.Type != UserStatus || ev.Gateway != "eu2" {
		t.Fatalf("status from the account: %+v", ev)
	}
	phone = ended(phone, crdt.StateDisconnected, 500)
	_, last = Decide(last, observe(acct, 550, nil, phone, laptop))
	laptop = ended(laptop, crdt.StateDisconnected, 600)
	ev, _ = Decide(last, observe(acct, 650, nil, phone, laptop))
	if ev == nil || ev.Type != UserOffline || ev.Gateway != "us1" {
		t.Fatalf("offline, the laptop last: %+v", ev)
	}
}
