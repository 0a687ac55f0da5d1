package state

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/internal/checkpoint"
)

// TestRemoveDepartedLooksAtWhatChanged checks which pods RemoveDeparted looks at: every pod
// at a state's first collection and the first after a restore; after that the departed
// pods and those that gained an assignment or a reuse pool (even one without devices) since.
// A pod it does not look at is trusted to be active still: the owner names every departure.
func TestRemoveDepartedLooksAtWhatChanged(t *testing.T) {
	commit := func(s *State, pod string) {
		s.Commit(pod, "c", "gpu", nil, checkpoint.DevicesPerNUMA{NoTopology: {"dev-" + pod}},
			&pluginapi.ContainerAllocateResponse{})
	}
	none := func(string) bool { return false }
	only := func(uids ...string) func(string) bool { return sets.New(uids...).Has }

	s := New(Options{})
	commit(s, "a")
	commit(s, "b")
	if got := s.RemoveDeparted(only("a"), nil); !cmp.Equal(got, []string{"b"}) {
		t.Fatalf("first collection removed %v, want [b]: it looks at every pod", got)
	}
	if got := s.RemoveDeparted(none, nil); got != nil {
		t.Fatalf("with nothing departed or gained, removed %v, want none", got)
	}

	commit(s, "c")
	s.NewContainerSteps("d", "init", true, nil) // a reuse pool, no device yet
	if got := s.RemoveDeparted(only("a"), []string{"x"}); !cmp.Equal(got, []string{"c"}) {
		t.Fatalf("removed %v, want [c], the gained pod that is not active", got)
	}
	if s.reuse["d"] != nil {
		t.Fatal("the reuse pool of d, gained and not active, was kept")
	}

	s.NewContainerSteps("a", "init", true, nil)
	if got := s.RemoveDeparted(only("b"), []string{"a"}); !cmp.Equal(got, []string{"a"}) {
		t.Fatalf("removed %v, want [a], departed (and gained: named once)", got)
	}
	if len(s.reuse) != 0 || len(s.PodUIDs()) != 0 {
		t.Fatalf("left pods %v and pools %v", s.PodUIDs(), s.reuse)
	}

	s.NewContainerSteps("p", "init", true, nil) // a pool the restore leaves as it is
	s.Restore(&checkpoint.Data{PodDeviceEntries: []checkpoint.PodDevicesEntry{
		{PodUID: "r1", ContainerName: "c", ResourceName: "gpu", DeviceIDs: checkpoint.DevicesPerNUMA{NoTopology: {"g1"}}, AllocResp: []byte{}},
		{PodUID: "r2", ContainerName: "c", ResourceName: "gpu", DeviceIDs: checkpoint.DevicesPerNUMA{NoTopology: {"g2"}}, AllocResp: []byte{}},
	}}, nil, time.Unix(0, 0))
	if got := s.RemoveDeparted(only("r2"), nil); !cmp.Equal(got, []string{"r1"}) {
		t.Fatalf("first collection after a restore removed %v, want [r1]", got)
	}
	if len(s.reuse) != 0 {
		t.Fatalf("pools %v left after the first collection after a restore", s.reuse)
	}
}
