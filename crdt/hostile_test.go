package crdt

import "testing"

// An honest origin never writes two records with one version. A corrupt or
// hostile peer could: the replica keeps the first record it holds at that
// version and refuses the other, so its origin log keeps naming every record
// it holds (CheckInvariants), whatever the kinds of the two records.
func TestTwoRecordsWithOneVersion(t *testing.T) {
	gw := newTestReplica(t, "gw", 1, Config{})
	first, err := gw.PutLocal(Session{User: "u", Device: "d", ID: "s1", Epoch: 1, State: StateActive}, 1)
	if err != nil {
		t.Fatal(err)
	}
	account, err := gw.PutAccountLocal("u", OverrideAway, "", 1)
	if err != nil {
		t.Fatal(err)
	}
	forgeSession := func(user string, v uint64) Delta {
		s := first.Session.Clone()
		s.User, s.ID, s.Version = user, "forged", v
		return Delta{Since: v - 1, Session: s}
	}
	forgeAccount := func(user string, v uint64) Delta {
		a := *account.Account
		a.User, a.Version = user, v
		return Delta{Since: v - 1, Account: &a}
	}
	for _, tc := range []struct {
		name   string
		forged Delta // claims the version of the first delta
	}{
		{"session over session", forgeSession("w", first.Version())},
		{"account over session", forgeAccount("w", first.Version())},
		{"session over account", forgeSession("w", account.Version())},
		{"account over account", forgeAccount("w", account.Version())},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obs := newTestReplica(t, "obs", 1, Config{})
			// The forged record arrives first through a sync (a delta at a
			// version already covered is skipped before any merge), then the
			// honest deltas.
			if _, err := obs.ApplySync(Sync{{Origin: gw.Self(), Watermark: 0,
				Sessions: sessionsOf(tc.forged), Accounts: accountsOf(tc.forged)}}, 2); err != nil {
				t.Fatal(err)
			}
			for _, d := range []Delta{first, account} {
				if _, _, err := obs.Apply(d, 2); err != nil {
					t.Fatal(err)
				}
			}
			if err := obs.CheckInvariants(); err != nil {
				t.Fatal(err)
			}
			if _, ok := obs.Session(Key{"w", "d"}); !ok {
				if _, ok := obs.Account("w"); !ok {
					t.Fatal("the record held first was not kept")
				}
			}
		})
	}
}

func sessionsOf(d Delta) []Session {
	if d.Session == nil {
		return nil
	}
	return []Session{*d.Session}
}

func accountsOf(d Delta) []Account {
	if d.Account == nil {
		return nil
	}
	return []Account{*d.Account}
}
