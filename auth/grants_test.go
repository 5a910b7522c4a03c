package auth

import (
	"strings"
	"testing"
)

func TestGrantsDefaults(t *testing.T) {
	for _, g := range []*Grants{must(ParseGrants(nil)), must(ParseGrants(&GrantsClaim{}))} {
		if !g.MayRead("alice", "alice") {
			t.Error("a user may not read itself")
		}
		if g.MayRead("alice", "bob") || g.MayReadGroup("eng") || g.MayJoin("eng") || g.MaySend("bob", []string{"eng"}) ||
			g.MaySend("alice", nil) || g.Backend() {
			t.Errorf("the defaults allow more than reading oneself: %+v", g)
		}
	}
}

func TestGrants(t *testing.T) {
	g := must(ParseGrants(&GrantsClaim{
		Read: []string{"user:bob", "group:eng"},
		Join: []string{"eng", "team-7"},
		Send: []string{"user:carol", "group:ops"},
	}))
	for _, tc := range []struct {
		what string
		got  bool
		want bool
	}{
		{"read self", g.MayRead("alice", "alice"), true},
		{"read bob", g.MayRead("alice", "bob"), true},
		{"read carol", g.MayRead("alice", "carol"), false},
		{"read user named like the group", g.MayRead("alice", "eng"), false},
		{"read group eng", g.MayReadGroup("eng"), true},
		{"read group named like the user", g.MayReadGroup("bob"), false},
		{"join eng", g.MayJoin("eng"), true},
		{"join ops", g.MayJoin("ops"), false},
		{"send carol", g.MaySend("carol", nil), true},
		{"send bob", g.MaySend("bob", nil), false},
		{"send dave, online in ops", g.MaySend("dave", []string{"eng", "ops"}), true},
		{"send dave, online in eng only", g.MaySend("dave", []string{"eng"}), false},
		{"send self", g.MaySend("alice", nil), false},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: %v, want %v", tc.what, tc.got, tc.want)
		}
	}
	all := must(ParseGrants(&GrantsClaim{Read: []string{"*"}, Join: []string{"*"}, Send: []string{"*"}}))
	if !all.MayReadAll() || must(ParseGrants(&GrantsClaim{Read: []string{"user:a", "group:g"}})).MayReadAll() {
		t.Error("MayReadAll")
	}
	if !all.MayRead("a", "anyone") || !all.MayReadGroup("any") || !all.MayJoin("any") || !all.MaySend("anyone", nil) || all.Backend() {
		t.Error("wildcards")
	}
	backend := must(ParseGrants(&GrantsClaim{Backend: true}))
	if !backend.MayReadAll() || !backend.MayRead("svc", "anyone") || !backend.MayReadGroup("any") || backend.MayJoin("any") || backend.MaySend("anyone", nil) {
		t.Error("backend reads everything, and only reads")
	}
	u := Unrestricted()
	if !u.MayRead("a", "b") || !u.MayReadGroup("g") || !u.MayJoin("g") || !u.MaySend("b", nil) || !u.MayReadAll() || !u.Backend() {
		t.Error("unrestricted")
	}
}

func TestParseGrantsRefuses(t *testing.T) {
	for _, c := range []GrantsClaim{
		{Read: []string{"bob"}},
		{Read: []string{"users:bob"}},
		{Read: []string{"user:"}},
		{Send: []string{"group:"}},
		{Send: []string{"**"}},
		{Join: []string{""}},
		{Join: []string{strings.Repeat("g", MaxGrantNameLen+1)}},
		{Read: []string{"user:\xff"}},
	} {
		if _, err := ParseGrants(&c); err == nil {
			t.Errorf("accepted %+v", c)
		}
	}
}

func TestGrantsClaimRoundTrip(t *testing.T) {
	c := &GrantsClaim{Read: []string{"group:eng", "user:bob", "*"}, Join: []string{"eng"}, Send: []string{"user:carol"}, Backend: true}
	got := must(ParseGrants(c)).Claim()
	if strings.Join(got.Read, ",") != "*,group:eng,user:bob" || strings.Join(got.Join, ",") != "eng" ||
		strings.Join(got.Send, ",") != "user:carol" || !got.Backend {
		t.Fatalf("claim %+v", got)
	}
}
