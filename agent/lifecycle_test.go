package agent

import (
	"testing"

	"github.com/kdm-project/kdm/agent/podresult"
	"github.com/kdm-project/kdm/agent/statusapi"
)

func admitted(name string) func(statusapi.NodeStatus) bool {
	return func(st statusapi.NodeStatus) bool {
		p := phase(st, name)
		return p != nil && p.Phase == podresult.PhaseAdmitted
	}
}

// TestRejectedPodStaysRejectedAcrossRestarts: a pod rejected for want of devices stays rejected
// after restarts, also once enough devices are free, as the kubelet's Failed pod is terminal;
// a new pod admitted after each restart shows that the sources were read by then.
func TestRejectedPodStaysRejectedAcrossRestarts(t *testing.T) {
	f := newFixture(t)
	a, stop := f.run()
	p := f.plugin("g0")
	f.waitFor(a, "1 device", func(st statusapi.NodeStatus) bool { return st.Allocatable["example.com/gpu"] == 1 })
	f.manifest("big", 3)
	st := f.waitFor(a, "big rejected", func(st statusapi.NodeStatus) bool {
		p := phase(st, "big")
		return p != nil && p.Phase == podresult.PhaseRejected
	})
	rejection := *phase(st, "big")
	stop()
	p.Stop()

	for round, marker := range []string{"after-one", "after-two"} {
		a, stop := f.run()
		p := f.plugin("g0", "g1", "g2", "g3")
		f.waitFor(a, "4 devices", func(st statusapi.NodeStatus) bool { return st.Allocatable["example.com/gpu"] == 4 })
		f.manifest(marker, 1)
		st := f.waitFor(a, marker+" admitted", admitted(marker))
		big := phase(st, "big")
		if big == nil || big.Phase != podresult.PhaseRejected || big.Reason != rejection.Reason || big.Message != rejection.Message {
			t.Fatalf("restart %d: big is %+v; want it still rejected: %s %s", round+1, big, rejection.Reason, rejection.Message)
		}
		if got := a.Manager().GetDevices(string(big.UID), "main"); len(got) != 0 {
			t.Fatalf("restart %d: the rejected pod holds %v", round+1, got)
		}
		stop()
		// The next round starts its own plugin on the same socket: this one, which serves its
		// socket again whenever a restart's clean-up removes it, must be gone first.
		p.Stop()
	}
}
