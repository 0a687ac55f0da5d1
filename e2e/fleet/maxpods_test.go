package fleet

import "testing"

// TestMaxPods: the pods of the killed tenth of the nodes (or of the node cut off) fit on the
// others; a hundred nodes take the 1,000 pods.
func TestMaxPods(t *testing.T) {
	for _, tc := range []struct {
		nodes     int
		allFaults bool
		want      int
	}{
		{0, true, 0},
		{-1, false, 0},
		{1, false, 8},
		{5, false, 56},    // 8+12+16+8+12
		{5, true, 44},     // less the cut-off node 4's 12, more than the killed node 0's 8
		{20, true, 216},   // 236 less nodes 0 and 1 (8+12), more than node 19's 12
		{100, true, 1080}, // 1196 less the first ten nodes' 116
		{100, false, 1196},
	} {
		if got := MaxPods(tc.nodes, tc.allFaults); got != tc.want {
			t.Errorf("MaxPods(%d, %v) = %d, want %d", tc.nodes, tc.allFaults, got, tc.want)
		}
	}
}
