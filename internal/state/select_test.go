package state

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/util/sets"
)

// TestSmallestEligible compares smallestEligible, on both of its paths, with taking the
// accepted IDs in sorted order.
func TestSmallestEligible(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, size := range []int{0, 1, 10, 100, 1000} {
		ids := sets.New[string]()
		for ids.Len() < size {
			ids.Insert(fmt.Sprintf("dev-%d", rng.IntN(10*size)))
		}
		for _, n := range []int{0, 1, 2, 7, maxPartialPick, maxPartialPick + 1, size} {
			for _, every := range []int{1, 2, 5} {
				eligible := func(id string) bool { return len(id)%every == 0 || every == 1 }
				var want []string
				for _, id := range sets.List(ids) {
					if len(want) < n && eligible(id) {
						want = append(want, id)
					}
				}
				if got := smallestEligible(ids, n, eligible); !slices.Equal(got, want) {
					t.Errorf("%d IDs, n=%d, every %d: got %v, want %v", size, n, every, got, want)
				}
			}
		}
	}
}
