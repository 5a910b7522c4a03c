package sim

import (
	"context"
	"reflect"
	"testing"
	"time"
)

func regionScenario() RegionConfig {
	c := RegionConfig{Config: DefaultConfig(), Regions: 3}
	c.Nodes, c.Changes, c.Duration = 90, 200, 20*time.Second
	return c
}

// Every change reaches every gateway of every other region, crossing the
// WAN once per other region, in a region round trip's order of time; the
// same scenario gives the same result.
func TestRegionsReachEveryRegionOncePerRegion(t *testing.T) {
	cfg := regionScenario()
	res, err := RunRegions(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", *res)
	if res.Changes != 200 || res.Reached != res.Changes {
		t.Errorf("%d of %d changes reached every other region", res.Reached, res.Changes)
	}
	if res.WANCopiesPerChange != 1 {
		t.Errorf("WAN copies per change per other region: %v, want 1", res.WANCopiesPerChange)
	}
	if res.ReachP50 < 80*time.Millisecond {
		t.Errorf("cross-region reach p50 %v under the 80ms between regions", res.ReachP50)
	}
	if res.RegionsExpired != 0 {
		t.Errorf("%d region expiries without a fault", res.RegionsExpired)
	}
	again, err := RunRegions(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(res, again) {
		t.Errorf("the same scenario gave %+v, then %+v", *res, *again)
	}
}

// Killing the first region's active bridge loses no change: the changes
// made while its successor takes over are pulled, and no region is shown
// expired meanwhile.
func TestRegionsBridgeCrashLosesNothing(t *testing.T) {
	cfg := regionScenario()
	cfg.CrashBridgeAt = 5 * time.Second
	res, err := RunRegions(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", *res)
	if res.BridgeCrashed == "" {
		t.Fatal("no bridge crashed")
	}
	if res.Reached != res.Changes {
		t.Errorf("%d of %d changes reached every other region", res.Reached, res.Changes)
	}
	if res.RegionsExpired != 0 {
		t.Errorf("%d region expiries during a bridge failover", res.RegionsExpired)
	}
	if res.WANPulls == 0 {
		t.Error("no repair pulls: the changes of the failover reached the other regions some other way")
	}
}
