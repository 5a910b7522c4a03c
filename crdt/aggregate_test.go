package crdt

import (
	"slices"
	"testing"
)

// TestAggregate covers every precedence rule of Aggregate and its ties.
func TestAggregate(t *testing.T) {
	sess := func(device string, epoch uint64, st Status) *Session {
		return &Session{User: "u", Device: device, ID: device + "-s", Epoch: epoch, Gateway: "gw", State: StateActive, Status: st}
	}
	ended := func(s *Session, state State) *Session {
		s.State = state
		return s
	}
	acct := func(ov Override, auth string) *Account {
		return &Account{User: "u", Override: ov, AuthoritativeDevice: auth}
	}
	tests := []struct {
		name     string
		sessions []*Session
		acct     *Account
		want     UserStatus
		devices  []string // contributors, in order
	}{
		// Rule 1: offline without an active session.
		{name: "no sessions", want: UserOffline},
		{name: "no sessions, override ignored", acct: acct(OverrideDND, ""), want: UserOffline},
		{name: "only ended sessions", sessions: []*Session{
			ended(sess("phone", 1, StatusAvailable), StateDisconnected),
			ended(sess("desk", 2, StatusBusy), StateExpired),
		}, acct: acct(OverrideBusy, "desk"), want: UserOffline},
		// Rule 2: the override, whatever the devices say.
		{name: "override away", sessions: []*Session{sess("phone", 1, StatusAvailable)},
			acct: acct(OverrideAway, ""), want: UserAway, devices: []string{"phone"}},
		{name: "override dnd", sessions: []*Session{sess("phone", 1, StatusAway)},
			acct: acct(OverrideDND, ""), want: UserDND, devices: []string{"phone"}},
		{name: "override busy", sessions: []*Session{sess("phone", 1, StatusAway)},
			acct: acct(OverrideBusy, ""), want: UserBusy, devices: []string{"phone"}},
		{name: "override beats authoritative device", sessions: []*Session{sess("desk", 1, StatusBusy), sess("phone", 1, StatusAvailable)},
			acct: acct(OverrideAway, "desk"), want: UserAway, devices: []string{"desk", "phone"}},
		{name: "override none leaves it to the devices", sessions: []*Session{sess("phone", 1, StatusAway)},
			acct: acct(OverrideNone, ""), want: UserAway, devices: []string{"phone"}},
		// Rule 3: the authoritative device, when it is active.
		{name: "authoritative busy", sessions: []*Session{sess("desk", 1, StatusBusy), sess("phone", 1, StatusAvailable)},
			acct: acct(OverrideNone, "desk"), want: UserBusy, devices: []string{"desk", "phone"}},
		{name: "authoritative away over an available device", sessions: []*Session{sess("desk", 1, StatusAway), sess("phone", 1, StatusAvailable)},
			acct: acct(OverrideNone, "desk"), want: UserAway, devices: []string{"desk", "phone"}},
		{name: "authoritative available over an away device", sessions: []*Session{sess("desk", 1, StatusAvailable), sess("phone", 1, StatusAway)},
			acct: acct(OverrideNone, "desk"), want: UserAvailable, devices: []string{"desk", "phone"}},
		{name: "authoritative device not connected", sessions: []*Session{sess("phone", 1, StatusAway)},
			acct: acct(OverrideNone, "desk"), want: UserAway, devices: []string{"phone"}},
		{name: "authoritative device ended: busy elsewhere is available", sessions: []*Session{
			ended(sess("desk", 1, StatusBusy), StateExpired), sess("phone", 1, StatusBusy)},
			acct: acct(OverrideNone, "desk"), want: UserAvailable, devices: []string{"phone"}},
		{name: "authoritative device with two records: the highest epoch speaks", sessions: []*Session{
			sess("desk", 2, StatusAway), sess("desk", 1, StatusBusy)},
			acct: acct(OverrideNone, "desk"), want: UserAway, devices: []string{"desk", "desk"}},
		// Rule 4: away if every active session is away, else available.
		{name: "single available", sessions: []*Session{sess("phone", 1, StatusAvailable)},
			want: UserAvailable, devices: []string{"phone"}},
		{name: "single away", sessions: []*Session{sess("phone", 1, StatusAway)},
			want: UserAway, devices: []string{"phone"}},
		{name: "all away", sessions: []*Session{sess("phone", 1, StatusAway), sess("desk", 3, StatusAway)},
			want: UserAway, devices: []string{"desk", "phone"}},
		{name: "one available beats away", sessions: []*Session{sess("phone", 1, StatusAway), sess("desk", 1, StatusAvailable)},
			want: UserAvailable, devices: []string{"desk", "phone"}},
		{name: "busy not authoritative counts as available", sessions: []*Session{sess("phone", 1, StatusBusy)},
			want: UserAvailable, devices: []string{"phone"}},
		{name: "busy not authoritative beats away", sessions: []*Session{sess("phone", 1, StatusAway), sess("desk", 1, StatusBusy)},
			acct: acct(OverrideNone, ""), want: UserAvailable, devices: []string{"desk", "phone"}},
		{name: "tie: two devices same status", sessions: []*Session{sess("b", 1, StatusAway), sess("a", 1, StatusAway)},
			want: UserAway, devices: []string{"a", "b"}},
		{name: "tie: two devices both available", sessions: []*Session{sess("b", 1, StatusAvailable), sess("a", 1, StatusAvailable)},
			want: UserAvailable, devices: []string{"a", "b"}},
		{name: "away with an ended available session", sessions: []*Session{
			sess("phone", 1, StatusAway), ended(sess("desk", 1, StatusAvailable), StateDisconnected)},
			want: UserAway, devices: []string{"phone"}},
		{name: "sessions sorted by device, then epoch", sessions: []*Session{
			sess("web", 1, StatusAway), sess("desk", 4, StatusAway), sess("phone", 2, StatusAway), sess("desk", 3, StatusAway)},
			want: UserAway, devices: []string{"desk", "desk", "phone", "web"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := slices.Clone(tc.sessions)
			p := Aggregate("u", in, tc.acct, 0)
			if p.User != "u" || p.Status != tc.want || p.Online != (tc.want != UserOffline) {
				t.Fatalf("got %s (online %v), want %s", p.Status, p.Online, tc.want)
			}
			var devs []string
			for _, c := range p.Sessions {
				devs = append(devs, c.Device)
			}
			if !slices.Equal(devs, tc.devices) {
				t.Fatalf("contributors %v, want %v", devs, tc.devices)
			}
			if !slices.IsSortedFunc(p.Sessions, func(a, b Contributor) int {
				if a.Device != b.Device {
					return compareStrings(a.Device, b.Device)
				}
				return cmpU64(a.Epoch, b.Epoch)
			}) {
				t.Fatalf("contributors not sorted: %+v", p.Sessions)
			}
			// Aggregate is pure: the input is not reordered or changed, and
			// any order of it gives the same answer.
			if !slices.Equal(in, tc.sessions) {
				t.Fatalf("Aggregate changed its input")
			}
			rev := slices.Clone(tc.sessions)
			slices.Reverse(rev)
			if q := Aggregate("u", rev, tc.acct, 0); !q.Equal(p) {
				t.Fatalf("reversed input gives %+v, want %+v", q, p)
			}
		})
	}
}

// TestAggregateContributor checks what a contributor reports.
func TestAggregateContributor(t *testing.T) {
	s := &Session{User: "u", Device: "phone", ID: "s9", Epoch: 7, Gateway: "g2", State: StateActive, Status: StatusBusy}
	p := Aggregate("u", []*Session{s}, nil, 0)
	want := Contributor{Session: "s9", Device: "phone", Epoch: 7, Gateway: "g2", Status: StatusBusy}
	if len(p.Sessions) != 1 || p.Sessions[0] != want {
		t.Fatalf("contributors %+v, want [%+v]", p.Sessions, want)
	}
}

// TestPresenceFollowsProjection: a replica's Presence is Aggregate over its
// projection: sessions of a gateway marked down do not count, and the
// account record applies.
func TestPresenceFollowsProjection(t *testing.T) {
	a := newTestReplica(t, "a", 1, Config{})
	b := newTestReplica(t, "b", 1, Config{})
	c := newTestReplica(t, "c", 1, Config{})
	put := func(r *Replica, dev string, st Status) {
		d, err := r.PutLocal(Session{User: "u", Device: dev, ID: dev, Epoch: 1, State: StateActive, Status: st}, 1)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.Apply(d, 1); err != nil {
			t.Fatal(err)
		}
	}
	put(a, "desk", StatusBusy)
	put(b, "phone", StatusAway)
	d, err := a.PutAccountLocal("u", OverrideNone, "desk", 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Apply(d, 2); err != nil {
		t.Fatal(err)
	}
	if p := c.Presence("u", 0); p.Status != UserBusy {
		t.Fatalf("authoritative desk busy: got %s", p.Status)
	}
	c.SetNodeDown("a", 3)
	if p := c.Presence("u", 0); p.Status != UserAway || len(p.Sessions) != 1 || p.Sessions[0].Device != "phone" {
		t.Fatalf("desk's gateway down: got %+v, want away from the phone alone", p)
	}
	c.SetNodeDown("b", 3)
	if p := c.Presence("u", 0); p.Online || p.Status != UserOffline {
		t.Fatalf("both gateways down: got %+v", p)
	}
	c.SetNodeUp("a")
	c.SetNodeUp("b")
	if p := c.Presence("u", 0); p.Status != UserBusy || len(p.Sessions) != 2 {
		t.Fatalf("both back: got %+v", p)
	}
	if err := c.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

// An invisible user who is online shows to others as an offline one does,
// with when a session of theirs last ended, and without it to themselves.
func TestPublicShowsAnInvisibleUsersLastSeen(t *testing.T) {
	r := newTestReplica(t, "g1", 1, Config{})
	if _, err := r.PutLastSeen("u", 5e9); err != nil {
		t.Fatal(err)
	}
	if _, err := r.PutLocal(Session{User: "u", Device: "d", ID: "s", Epoch: 2, State: StateActive}, 6e9); err != nil {
		t.Fatal(err)
	}
	if _, err := r.PutAccount(Account{User: "u", Override: OverrideInvisible}, 7e9); err != nil {
		t.Fatal(err)
	}
	p := r.Presence("u", 8e9)
	if !p.Online || !p.Invisible || p.LastSeen != 0 {
		t.Fatalf("the user's own view %+v: want online, invisible, no last seen", p)
	}
	pub := p.Public()
	if pub.Online || pub.Status != UserOffline || len(pub.Sessions) != 0 || pub.LastSeen != 5e9 {
		t.Fatalf("the public view %+v: want offline, last seen 5s", pub)
	}
}
