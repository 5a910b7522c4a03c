package crdt

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"github.com/vmihailenco/msgpack/v5"
)

// An account's until lapses its override, text and emoji at that time,
// with no write: Aggregate computes the presence at the time it is given.
func TestAggregateUntilLapses(t *testing.T) {
	t.Parallel()
	phone := &Session{User: "u", Device: "phone", ID: "s1", Epoch: 1, Gateway: "a", State: StateActive, Status: StatusAvailable}
	acct := &Account{User: "u", Override: OverrideDND, AuthoritativeDevice: "phone", Text: "in a meeting", Emoji: "📅", Until: 100}
	p := Aggregate("u", []*Session{phone}, acct, 99)
	if p.Status != UserDND || p.Text != "in a meeting" || p.Emoji != "📅" || p.Until != 100 {
		t.Fatalf("before until: %+v", p)
	}
	p = Aggregate("u", []*Session{phone}, acct, 100)
	if p.Status != UserAvailable || p.Text != "" || p.Emoji != "" || p.Until != 0 {
		t.Fatalf("at until: %+v, want available without text, emoji or until", p)
	}
	// The authoritative device does not lapse.
	away := *phone
	away.Status = StatusAway
	other := &Session{User: "u", Device: "laptop", ID: "s2", Epoch: 1, Gateway: "a", State: StateActive, Status: StatusAvailable}
	if p := Aggregate("u", []*Session{&away, other}, acct, 200); p.Status != UserAway {
		t.Fatalf("after until the authoritative device still speaks: %+v", p)
	}
	// Text without until stays; an offline user shows it too.
	acct = &Account{User: "u", Text: "on leave"}
	if p := Aggregate("u", nil, acct, 1<<62); p.Online || p.Text != "on leave" {
		t.Fatalf("offline with text: %+v", p)
	}
	// Presence.Equal sees the lapse, so a notifier emits it.
	if a, b := Aggregate("u", []*Session{phone}, &Account{User: "u", Text: "x", Until: 10}, 9),
		Aggregate("u", []*Session{phone}, &Account{User: "u", Text: "x", Until: 10}, 10); a.Equal(b) {
		t.Fatal("a lapse leaves the presence equal")
	}
}

func TestAccountEffective(t *testing.T) {
	t.Parallel()
	a := Account{User: "u", Override: OverrideAway, AuthoritativeDevice: "d", Text: "t", Emoji: "e", Until: 5}
	if got := a.Effective(4); got != a {
		t.Fatalf("before until: %+v", got)
	}
	want := Account{User: "u", AuthoritativeDevice: "d"}
	if got := a.Effective(5); got != want {
		t.Fatalf("at until: %+v, want %+v", got, want)
	}
}

// statusDeltas are a session delta with meta and info and an account
// delta with text, emoji and until.
func statusDeltas() []Delta {
	o := Origin{Node: "g1", Incarnation: 1}
	return []Delta{
		{Since: 0, Session: &Session{User: "u", Device: "d", ID: "s", Epoch: 1, Seq: 1, Gateway: "g1",
			Meta: `{"tab":"inbox"}`, Info: `{"name":"U"}`, Origin: o, Version: 1}},
		{Since: 1, Account: &Account{User: "u", Override: OverrideDND, Text: "lunch 🍔", Emoji: "🍔", Until: 1_700_000_000_000_000_000,
			Stamp: Timestamp{Wall: 5}, Writer: "g1", Origin: o, Version: 2}},
	}
}

func TestCodecStatusFieldsRoundTrip(t *testing.T) {
	t.Parallel()
	ds := statusDeltas()
	b, err := AppendDeltas(nil, ds)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeDeltas(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got[0].Session, ds[0].Session) || *got[1].Account != *ds[1].Account {
		t.Fatalf("round trip:\n%+v\n%+v", *got[0].Session, *got[1].Account)
	}
	sb, err := AppendSync(nil, Sync{{Origin: ds[0].Origin(), Watermark: 2, Sessions: []Session{*ds[0].Session}, Accounts: []Account{*ds[1].Account}}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := DecodeSync(sb)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(s[0].Sessions[0], *ds[0].Session) || s[0].Accounts[0] != *ds[1].Account {
		t.Fatalf("sync round trip: %+v", s)
	}
}

// A record without the new fields is encoded with the fields of the
// previous version (14 for a session, 9 for an account), so a gateway of
// that version still decodes it.
func TestCodecWithoutStatusFieldsKeepsOldLayout(t *testing.T) {
	t.Parallel()
	ds := statusDeltas()
	s, a := *ds[0].Session, *ds[1].Account
	s.Meta, s.Info = "", ""
	a.Text, a.Emoji, a.Until = "", "", 0
	for _, tc := range []struct {
		d    Delta
		want int
	}{{Delta{Since: 0, Session: &s}, 14}, {Delta{Since: 1, Account: &a}, 9}} {
		b, err := AppendDeltas(nil, []Delta{tc.d})
		if err != nil {
			t.Fatal(err)
		}
		dec := msgpack.NewDecoder(strings.NewReader(string(b)))
		for _, want := range []int{1, 3} { // batch, delta
			if n, _ := dec.DecodeArrayLen(); n != want {
				t.Fatalf("array of %d, want %d", n, want)
			}
		}
		_, _ = dec.DecodeUint64() // since
		_, _ = dec.DecodeUint64() // kind
		if n, _ := dec.DecodeArrayLen(); n != tc.want {
			t.Fatalf("record of %d fields, want %d", n, tc.want)
		}
	}
}

// Over-long or malformed status fields are refused by the gossip decoder
// (deltas and syncs), whatever a peer sends.
func TestDecodeRefusesOverLongStatusFields(t *testing.T) {
	t.Parallel()
	long := func(n int, c string) string { return strings.Repeat(c, n) }
	bigMeta := `{"k":"` + long(MaxMetaBytes, "x") + `"}`
	for name, mut := range map[string]func(s *Session, a *Account){
		"text chars":  func(_ *Session, a *Account) { a.Text = long(MaxStatusTextChars+1, "é") },
		"text bytes":  func(_ *Session, a *Account) { a.Text = long(4*MaxStatusTextChars+1, "a") },
		"text utf8":   func(_ *Session, a *Account) { a.Text = "bad \xff" },
		"emoji":       func(_ *Session, a *Account) { a.Emoji = long(MaxStatusEmojiBytes+1, "a") },
		"until":       func(_ *Session, a *Account) { a.Until = -1 },
		"meta long":   func(s *Session, _ *Account) { s.Meta = bigMeta },
		"meta object": func(s *Session, _ *Account) { s.Meta = `[1,2]` },
		"meta json":   func(s *Session, _ *Account) { s.Meta = `{"a":` },
		"info long":   func(s *Session, _ *Account) { s.Info = bigMeta },
		"info object": func(s *Session, _ *Account) { s.Info = `"x"` },
	} {
		t.Run(name, func(t *testing.T) {
			ds := statusDeltas()
			s, a := *ds[0].Session, *ds[1].Account
			mut(&s, &a)
			ds[0].Session, ds[1].Account = &s, &a
			b, err := AppendDeltas(nil, ds)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := DecodeDeltas(b); !errors.Is(err, ErrDecode) {
				t.Fatalf("deltas decoded: %v", err)
			}
			sb, err := AppendSync(nil, Sync{{Origin: s.Origin, Watermark: 2, Sessions: []Session{s}, Accounts: []Account{a}}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := DecodeSync(sb); !errors.Is(err, ErrDecode) {
				t.Fatalf("sync decoded: %v", err)
			}
			// Nor does a replica apply it, or write it as its own.
			r := newTestReplica(t, "r", 1, Config{})
			for _, d := range ds {
				if d.Validate() == nil {
					continue
				}
				if _, _, err := r.Apply(d, 0); err == nil {
					t.Fatalf("applied %+v", d)
				}
			}
			orig := statusDeltas()
			if a != *orig[1].Account {
				if _, err := r.PutAccount(Account{User: "u", Text: a.Text, Emoji: a.Emoji, Until: a.Until}, 1); err == nil {
					t.Fatalf("PutAccount wrote %+v", a)
				}
			}
			if !reflect.DeepEqual(s, *orig[0].Session) {
				if _, err := r.PutLocal(Session{User: "u", Device: "d", ID: "s", Epoch: 1, Meta: s.Meta, Info: s.Info}, 1); err == nil {
					t.Fatalf("PutLocal wrote meta %q info %q", s.Meta, s.Info)
				}
			}
		})
	}
}

// A session's meta and info replicate with it, change with later writes
// and go with the record, and the replica's name table counts them.
func TestReplicaSessionMetaInfo(t *testing.T) {
	t.Parallel()
	a := newTestReplica(t, "a", 1, Config{})
	b := newTestReplica(t, "b", 1, Config{})
	check := func(r *Replica) {
		t.Helper()
		if err := r.CheckInvariants(); err != nil {
			t.Fatal(err)
		}
	}
	put := func(meta, info string, st State) {
		t.Helper()
		d, err := a.PutLocal(Session{User: "u", Device: "d", ID: "s1", Epoch: 7, State: st, Meta: meta, Info: info}, 10)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := b.Apply(d, 10); err != nil {
			t.Fatal(err)
		}
		check(a)
		check(b)
	}
	put(`{"tab":"inbox"}`, `{"name":"U"}`, StateActive)
	for _, r := range []*Replica{a, b} {
		p := r.Presence("u", 0)
		if len(p.Sessions) != 1 || p.Sessions[0].Meta != `{"tab":"inbox"}` || p.Sessions[0].Info != `{"name":"U"}` {
			t.Fatalf("%s: %+v", r.Self(), p)
		}
	}
	put(`{"tab":"drafts"}`, `{"name":"U"}`, StateActive)
	if p := b.Presence("u", 0); p.Sessions[0].Meta != `{"tab":"drafts"}` {
		t.Fatalf("meta not replaced: %+v", p)
	}
	put("", "", StateActive)
	if p := b.Presence("u", 0); p.Sessions[0].Meta != "" || p.Sessions[0].Info != "" || b.extras != nil {
		t.Fatalf("meta not cleared: %+v, extras %v", p, b.extras)
	}
	put(`{"x":1}`, "", StateDisconnected)
	if string(canonicalSnapshot(a)) != string(canonicalSnapshot(b)) {
		t.Fatal("replicas differ")
	}
	// Collected with the tombstone: nothing of it is held.
	for _, r := range []*Replica{a, b} {
		r.GC(int64(DefaultTombstoneHorizon) * 10)
		check(r)
		if r.extras != nil || r.names.held() != 0 {
			t.Fatalf("%s holds extras %v and %d names after GC", r.Self(), r.extras, r.names.held())
		}
	}
}

// The record of a session stays 80 bytes: meta and info are held out of
// line, so a record without them costs what it did.
func TestRecordSize(t *testing.T) {
	t.Parallel()
	if n := unsafe.Sizeof(record{}); n != 80 {
		t.Fatalf("record is %d bytes, want 80", n)
	}
}
