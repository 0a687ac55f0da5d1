package nodestatus

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
)

func TestAllocatableOf(t *testing.T) {
	for _, tc := range []struct{ capacity, reserved, want string }{
		{"8", "1500m", "6500m"}, {"1Gi", "2Gi", "0"}, {"4", "0", "4"},
	} {
		got := allocatableOf(resource.MustParse(tc.capacity), resource.MustParse(tc.reserved))
		if got.Cmp(resource.MustParse(tc.want)) != 0 {
			t.Errorf("%s - %s = %s, want %s", tc.capacity, tc.reserved, got.String(), tc.want)
		}
	}
}
