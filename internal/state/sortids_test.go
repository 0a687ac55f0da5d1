package state

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestSortIDs compares sortIDs with slices.Sort on IDs shaped like real ones (shared
// prefixes, numbers of different lengths, prefixes of one another, empty and repeated IDs)
// and on a chain built to nest distributions as deep as the IDs are long.
func TestSortIDs(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	shapes := map[string]func(i int) string{
		"numbered":   func(i int) string { return fmt.Sprintf("dev-%d", rng.IntN(5000)) },
		"uuid-like":  func(i int) string { return fmt.Sprintf("GPU-%08x-%04x", rng.Uint32(), rng.IntN(1<<16)) },
		"prefixes":   func(i int) string { return strings.Repeat("a", rng.IntN(80)) + strings.Repeat("b", rng.IntN(3)) },
		"bytes":      func(i int) string { return string([]byte{byte(rng.IntN(256)), byte(rng.IntN(256))}) },
		"with empty": func(i int) string { return []string{"", "x", "xy", "\x00", "\xff"}[rng.IntN(5)] },
		"chain":      func(i int) string { return strings.Repeat("z", i) + "a" },
	}
	for name, gen := range shapes {
		for _, n := range []int{0, 1, 2, radixCutoff, radixCutoff + 1, 1000, 20000} {
			ids := make([]string, n)
			for i := range ids {
				ids[i] = gen(i)
			}
			want := slices.Clone(ids)
			slices.Sort(want)
			sortIDs(ids)
			if !slices.Equal(ids, want) {
				t.Errorf("%s, %d IDs: not sorted as slices.Sort sorts them", name, n)
			}
		}
	}
}

func BenchmarkSortIDs(b *testing.B) {
	ids := make([]string, 1_000_000)
	for i := range ids {
		ids[i] = fmt.Sprintf("dev-%d", i)
	}
	rand.New(rand.NewPCG(3, 4)).Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	for _, sorter := range []struct {
		name string
		sort func([]string)
	}{{"radix", sortIDs}, {"slices.Sort", slices.Sort[[]string]}} {
		b.Run(sorter.name, func(b *testing.B) {
			work := make([]string, len(ids))
			for b.Loop() {
				copy(work, ids)
				sorter.sort(work)
			}
		})
	}
}
