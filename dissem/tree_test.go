package dissem

import "testing"

// TestTreeReachesEveryMemberOnce checks that, for every owner, the relay
// tree reaches each other member exactly once within two hops.
func TestTreeReachesEveryMemberOnce(t *testing.T) {
	for _, n := range []int{1, 2, 3, 10, 65, 100, 1000} {
		k := TreeFanout(n)
		for owner := 0; owner < n; owner += max(1, n/7) {
			got := make([]int, n)
			for _, c := range TreeChildren(n, k, owner, owner) {
				got[c]++
				for _, g := range TreeChildren(n, k, owner, c) {
					got[g]++
					if len(TreeChildren(n, k, owner, g)) != 0 {
						t.Fatalf("n=%d owner=%d: member %d at depth 2 has children", n, owner, g)
					}
				}
			}
			for i, c := range got {
				if want := map[bool]int{true: 0, false: 1}[i == owner]; c != want {
					t.Fatalf("n=%d owner=%d: member %d reached %d times, want %d", n, owner, i, c, want)
				}
			}
		}
	}
}
