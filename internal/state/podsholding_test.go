package state

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/internal/checkpoint"
)

// TestPodsHoldingMatchesScan checks PodsHolding against a plain scan of every pod's devices,
// and AllocatedAmong against the intersection of the held and the asked devices,
// on random states: pods with several containers and resources, devices under one or two
// NUMA nodes, and asked IDs that are some, all or none of the held ones, repeated or never
// held. The case where every held device is asked takes PodsHolding's shortcut; the test
// fails if the shortcut counts a pod holding only devices of another resource, or misses one.
func TestPodsHoldingMatchesScan(t *testing.T) {
	for seed := uint64(1); seed <= 300; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		s := New(Options{})
		for _, res := range []string{"r", "q"} {
			s.Connect(res)
		}
		free := map[string][]string{}
		for _, res := range []string{"r", "q"} {
			for i := range 12 {
				free[res] = append(free[res], fmt.Sprintf("%s%d", res, i))
			}
			rng.Shuffle(len(free[res]), func(i, j int) { free[res][i], free[res][j] = free[res][j], free[res][i] })
		}
		for pod := range rng.IntN(6) {
			for c := range 1 + rng.IntN(2) {
				for _, res := range []string{"r", "q"} {
					n := rng.IntN(3)
					if n > len(free[res]) || rng.IntN(2) == 0 {
						continue
					}
					ids := free[res][:n]
					free[res] = free[res][n:]
					devs := checkpoint.DevicesPerNUMA{NoTopology: ids}
					if n == 2 && rng.IntN(2) == 0 {
						devs = checkpoint.DevicesPerNUMA{0: ids[:1], 1: ids[1:]}
					}
					s.Commit(fmt.Sprintf("pod-%d", pod), fmt.Sprintf("c%d", c), res, sets.New(ids...), devs, &pluginapi.ContainerAllocateResponse{})
				}
			}
		}
		held := sets.List(s.Allocated("r"))
		for _, ask := range [][]string{
			held,                                // every held device: the shortcut
			append(slices.Clone(held), held...), // every one, twice
			append([]string{"r-never"}, held...),
			pick(rng, held),
			pick(rng, held),
			{"r-never"},
			nil,
		} {
			got, want := s.PodsHolding("r", ask), scanHolding(s, "r", ask)
			if !slices.Equal(got, want) {
				t.Fatalf("seed %d: PodsHolding(r, %v) = %v, want %v", seed, ask, got, want)
			}
			among := s.AllocatedAmong("r", sets.New(ask...))
			slices.Sort(among)
			if want := sets.List(sets.New(held...).Intersection(sets.New(ask...))); !slices.Equal(among, want) {
				t.Fatalf("seed %d: AllocatedAmong(r, %v) = %v, want %v", seed, ask, among, want)
			}
		}
	}
}

// pick returns a random subset of ids.
func pick(rng *rand.Rand, ids []string) []string {
	var out []string
	for _, id := range ids {
		if rng.IntN(2) == 0 {
			out = append(out, id)
		}
	}
	return out
}

// scanHolding is PodsHolding by a plain scan: the pods with a container whose allocation of
// res lists one of ids, sorted, each once; nil when there is none.
func scanHolding(s *State, res string, ids []string) []string {
	want := sets.New(ids...)
	var uids []string
	for uid, containers := range s.pods {
		found := false
		for _, resources := range containers {
			if a := resources[res]; a != nil {
				for _, list := range a.Devices {
					for _, id := range list {
						found = found || want.Has(id)
					}
				}
			}
		}
		if found {
			uids = append(uids, uid)
		}
	}
	sort.Strings(uids)
	return uids
}
