package agent

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kdm-project/kdm/agent/podresult"
	"github.com/kdm-project/kdm/agent/statusapi"
	"github.com/kdm-project/kdm/checkpoint"
	"github.com/kdm-project/kdm/devicemanager"
)

// TestAdmittedEventCountsDistinctDevices: an init container and the app container after it
// share their two GPUs; the Admitted event says the pod holds 2, not 4, and lists resources in
// name order.
func TestAdmittedEventCountsDistinctDevices(t *testing.T) {
	l := newEventLog(time.Now)
	gpus := []podresult.Allocation{{Resource: "nvidia.com/gpu", DeviceIDs: checkpoint.DevicesPerNUMA{0: {"GPU-0", "GPU-1"}}}}
	r := &podresult.PodResult{Namespace: "ml", Name: "training", UID: types.UID("u1"), Phase: podresult.PhaseAdmitted,
		Containers: []podresult.ContainerResult{
			{Name: "setup", Init: true, Allocations: gpus},
			{Name: "train", Allocations: append(gpus,
				podresult.Allocation{Resource: "example.com/nic", DeviceIDs: checkpoint.DevicesPerNUMA{-1: {"nic-a"}}})},
		}}
	l.podRecorded(r)
	ev := l.recent()
	if len(ev) != 1 || ev[0].Kind != statusapi.EventAdmitted {
		t.Fatalf("events %+v, want one Admitted", ev)
	}
	if want := "admitted with 1 × example.com/nic; 2 × nvidia.com/gpu"; ev[0].Message != want {
		t.Errorf("event %q, want %q", ev[0].Message, want)
	}
}

// TestWaitingEventHasDeadline: a waiting pod's event says in words what it waits for and
// carries the deadline for the page's countdown, instead of the result's RFC 3339 text.
func TestWaitingEventHasDeadline(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	l := newEventLog(func() time.Time { return now })
	deadline := now.Add(5 * time.Minute)
	r := &podresult.PodResult{Namespace: "ns", Name: "p", UID: types.UID("u1"), Phase: podresult.PhasePending,
		Message: "container \"main\" waits for the device plugin of example.com/gpu to register, until " +
			deadline.Format(time.RFC3339) + " at the latest"}
	l.podWaiting(r.UID, "main", "example.com/gpu", deadline)
	l.podRecorded(r)
	ev := l.recent()
	if len(ev) != 1 || ev[0].Kind != statusapi.EventWaiting {
		t.Fatalf("events %+v, want one Waiting", ev)
	}
	e := ev[0]
	if e.Deadline == nil || !e.Deadline.Equal(deadline) || e.Resource != "example.com/gpu" {
		t.Errorf("event deadline %v resource %q, want %v and example.com/gpu", e.Deadline, e.Resource, deadline)
	}
	if want := `container "main" waits for the device plugin of example.com/gpu to register`; e.Message != want {
		t.Errorf("event %q, want %q", e.Message, want)
	}
}

// TestPageStateFreeAndPolicy: the page's state names the policy in force and counts, per
// resource, the devices a new pod could get; none while the plugin is away.
func TestPageStateFreeAndPolicy(t *testing.T) {
	f := newFixture(t)
	a, _ := f.runWith(Config{PodManifestPath: f.pods, Policy: devicemanager.KDMPolicy()})
	p := f.plugin("g0", "g1", "g2", "g3")
	f.manifest("one", 1)
	f.waitFor(a, "the pod admitted", func(st statusapi.NodeStatus) bool {
		r := phase(st, "one")
		return r != nil && r.Phase == podresult.PhaseAdmitted && len(devicesOf(r)) == 1
	})
	st := a.PageState()
	if st.Policy != devicemanager.KDMPolicyName {
		t.Errorf("policy %q, want %q", st.Policy, devicemanager.KDMPolicyName)
	}
	if len(st.Resources) != 1 || st.Resources[0].Free != 3 {
		t.Fatalf("resources %+v, want 3 of 4 devices free", st.Resources)
	}
	p.Stop()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := a.PageState()
		if len(st.Resources) == 1 && st.Resources[0].Endpoint.State == string(devicemanager.EndpointStopped) {
			if st.Resources[0].Free != 0 {
				t.Fatalf("%d devices free while the plugin is away, want 0", st.Resources[0].Free)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the endpoint did not stop: %+v", st.Resources)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
