package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/rollcall/rollcall/gossip"
)

// `rollcall members` adds REGION and BRIDGE columns in a multi-region
// cluster (which gateways are bridges, which one is its region's active
// bridge, which one sees no other region), and prints a single-region
// cluster's table as it always did.
func TestMembersTableRegionColumns(t *testing.T) {
	one := []gossip.Member{
		{Name: "gw1", Addr: "10.0.0.1:7946", State: "alive", Incarnation: 3, ClientAddr: "10.0.0.1:7400", Sessions: 2, Self: true},
		{Name: "gw2", Addr: "10.0.0.2:7946", State: "dead", Incarnation: 1, ClientAddr: "10.0.0.2:7400", LeaseExpired: true},
	}
	var out bytes.Buffer
	if err := writeMembers(&out, one); err != nil {
		t.Fatal(err)
	}
	want := "NAME        STATE  GOSSIP ADDR    CLIENT ADDR    INCARNATION  SESSIONS  SESSIONS SHOWN\n" +
		"gw1 (self)  alive  10.0.0.1:7946  10.0.0.1:7400  3            2         online\n" +
		"gw2         dead   10.0.0.2:7946  10.0.0.2:7400  1            0         expired\n"
	if out.String() != want {
		t.Errorf("single-region table:\n%s\nwant:\n%s", out.String(), want)
	}

	multi := []gossip.Member{
		{Name: "eu0", State: "alive", Incarnation: 1, Region: "eu", Bridge: "standby", NoWAN: true},
		{Name: "eu1", State: "alive", Incarnation: 1, Region: "eu", Bridge: "active"},
		{Name: "eu2", State: "alive", Incarnation: 1, Region: "eu", Self: true},
	}
	out.Reset()
	if err := writeMembers(&out, multi); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 || !strings.HasSuffix(strings.Join(strings.Fields(lines[0]), " "), "SESSIONS SHOWN REGION BRIDGE") {
		t.Fatalf("multi-region table:\n%s", out.String())
	}
	for i, tail := range []string{"eu standby (no WAN)", "eu active", "eu -"} {
		if f := strings.Join(strings.Fields(lines[i+1]), " "); !strings.HasSuffix(f, tail) {
			t.Errorf("row %q: want it to end %q", lines[i+1], tail)
		}
	}
}
