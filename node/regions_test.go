package node

import (
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/rollcall/rollcall/cluster"
)

// fakeRegions is a cluster member of a multi-region cluster.
type fakeRegions struct {
	fakeMembership
	status RegionStatus
}

func (f *fakeRegions) RegionStatus() (RegionStatus, bool) { return f.status, true }

var testRegionStatus = RegionStatus{Region: "eu", ActiveBridge: "n2",
	Bridges: []cluster.BridgeState{
		{Name: "n1", Reach: []string{}, Reported: true},
		{Name: "n2", Active: true, Reach: []string{"ap", "us"}, Reported: true},
	},
	Others: []cluster.OtherRegion{
		{Region: "ap", Bridge: "ap0", Gateways: 2, Lease: "expired", HeardAgoMS: 12500},
		{Region: "us", Bridge: "us1", Gateways: 3, Lease: "up", HeardAgoMS: 300},
	}}

// GET /v1/regions answers what the cluster knows of the regions, and the
// status page's summary carries the same; a single-region or standalone
// gateway answers its region with empty lists, and its summary has no
// regions at all (as before regions existed).
func TestRegionsEndpointAndSummary(t *testing.T) {
	n := uiNode(t, func(c *Config) {
		c.Cluster = &fakeRegions{fakeMembership: fakeMembership{members: []MemberState{{Name: "n1", State: "alive", Self: true}}},
			status: testRegionStatus}
	})
	base := "http://" + n.HTTPAddr().String()
	var got RegionStatus
	getJSON(t, base+"/v1/regions", http.StatusOK, &got)
	if !reflect.DeepEqual(got, testRegionStatus) {
		t.Errorf("GET /v1/regions: %+v, want %+v", got, testRegionStatus)
	}
	var s UISummary
	getJSON(t, base+"/v1/ui/summary", http.StatusOK, &s)
	if s.Regions == nil || !reflect.DeepEqual(*s.Regions, testRegionStatus) {
		t.Errorf("summary's regions: %+v", s.Regions)
	}

	for name, mut := range map[string]func(*Config){
		"standalone": nil,
		"one region": func(c *Config) {
			c.Cluster = &fakeMembership{members: []MemberState{{Name: "n1", State: "alive", Self: true}}}
		},
	} {
		one := uiNode(t, mut)
		base := "http://" + one.HTTPAddr().String()
		var got RegionStatus
		getJSON(t, base+"/v1/regions", http.StatusOK, &got)
		if got.Region != "default" || got.ActiveBridge != "" || got.Bridges == nil || len(got.Bridges) != 0 || got.Others == nil || len(got.Others) != 0 {
			t.Errorf("%s: GET /v1/regions: %+v", name, got)
		}
		resp, err := http.Get(base + "/v1/ui/summary")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var raw map[string]json.RawMessage
		if err := json.Unmarshal(b, &raw); err != nil {
			t.Fatal(err)
		}
		if _, ok := raw["regions"]; ok {
			t.Errorf("%s: the summary carries regions: %s", name, b)
		}
	}

	// The page has the section its script fills.
	resp, err := http.Get(base + "/ui/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(page), `id="regions-section"`) || !strings.Contains(string(page), "Other regions") {
		t.Error("the status page has no Other regions section")
	}
}
