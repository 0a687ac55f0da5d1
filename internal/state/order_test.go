package state

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/internal/checkpoint"
)

// referenceSnapshot computes what Snapshot must return from scratch: every recorded
// allocation in the order of the steps that committed them (committedAt, by pod, container
// and resource), and each listed resource's healthy devices sorted.
func referenceSnapshot(s *State, committedAt map[[3]string]int) *checkpoint.Data {
	d := &checkpoint.Data{RegisteredDevices: map[string][]string{}}
	for pod, ctrs := range s.pods {
		for ctr, ress := range ctrs {
			for res, a := range ress {
				if a.raw == nil {
					continue
				}
				d.PodDeviceEntries = append(d.PodDeviceEntries, checkpoint.PodDevicesEntry{
					PodUID: pod, ContainerName: ctr, ResourceName: res, DeviceIDs: a.Devices, AllocResp: a.raw})
			}
		}
	}
	slices.SortFunc(d.PodDeviceEntries, func(a, b checkpoint.PodDevicesEntry) int {
		return committedAt[[3]string{a.PodUID, a.ContainerName, a.ResourceName}] -
			committedAt[[3]string{b.PodUID, b.ContainerName, b.ResourceName}]
	})
	for name, r := range s.resources {
		if r.hasSets() {
			d.RegisteredDevices[name] = sets.List(r.healthy)
		}
	}
	return d
}

// TestSnapshotKeepsFileOrder applies random selections, releases, commits, replacements,
// uncommits, garbage collections, restores and health changes, and compares every snapshot
// and every Available set, which are kept between calls, with ones computed from scratch:
// the entries in the order they were committed, whatever their pods and containers.
func TestSnapshotKeepsFileOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	s := New(Options{})
	resources := []string{"a.com/gpu", "b.com/nic"}
	for _, res := range resources {
		s.Connect(res)
		var devs []*pluginapi.Device
		for i := range 8 {
			devs = append(devs, &pluginapi.Device{ID: fmt.Sprintf("d%d", i), Health: pluginapi.Healthy})
		}
		s.ApplyDeviceList(res, devs)
	}
	pod := func() string { return fmt.Sprintf("pod-%02d", rng.IntN(12)) }
	ctr := func() string { return fmt.Sprintf("c%d", rng.IntN(3)) }
	committedAt := map[[3]string]int{}
	for step := range 2000 {
		res := resources[rng.IntN(len(resources))]
		switch op := rng.IntN(10); {
		case op < 5:
			id := fmt.Sprintf("d%d", rng.IntN(8))
			resp := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{"STEP": fmt.Sprint(step)}}
			if rng.IntN(8) == 0 {
				resp = nil // not checkpointed
			}
			p, c := pod(), ctr()
			s.Commit(p, c, res, sets.New(id), checkpoint.DevicesPerNUMA{NoTopology: {id}}, resp)
			committedAt[[3]string{p, c, res}] = step
		case op < 6:
			s.uncommit(pod(), ctr(), []string{res})
		case op == 6:
			none := func(_, _ sets.Set[string], _ int) (sets.Set[string], error) { return sets.New[string](), nil }
			p, c := pod(), ctr()
			ids, _, err := s.Select(Request{PodUID: p, Container: c, Resource: res, Required: 1 + rng.IntN(2), SourcesReady: true}, none)
			if err != nil || ids.Len() == 0 {
				break
			}
			if rng.IntN(2) == 0 {
				s.release(res, ids)
				break
			}
			devs, _, ok := s.DevicesPerNUMA(res, ids)
			if !ok {
				t.Fatalf("step %d: picked devices %v not listed", step, ids)
			}
			s.Commit(p, c, res, ids, devs, &pluginapi.ContainerAllocateResponse{})
			committedAt[[3]string{p, c, res}] = step
		case op == 7:
			active := sets.New[string]()
			for range 8 {
				active.Insert(pod())
			}
			s.RemoveInactive(active)
		case op == 8:
			health := pluginapi.Healthy
			if rng.IntN(2) == 0 {
				health = pluginapi.Unhealthy
			}
			var devs []*pluginapi.Device
			for i := range 8 + rng.IntN(2) {
				devs = append(devs, &pluginapi.Device{ID: fmt.Sprintf("d%d", i), Health: health})
			}
			s.ApplyDeviceList(res, devs)
			if rng.IntN(4) == 0 {
				s.Disconnect(res, time.Unix(int64(step), 0))
			}
		default:
			n := New(Options{})
			n.resources = s.resources
			if bad := n.Restore(&checkpoint.Data{PodDeviceEntries: s.Prepared().Data().PodDeviceEntries}, nil, origin); len(bad) > 0 {
				t.Fatalf("step %d: entries did not decode: %v", step, bad)
			}
			s = n
		}
		for _, r := range resources {
			want := sets.New[string]()
			for id := range s.Healthy(r) {
				if !s.isAllocated(r, id) && !s.pending[r].Has(id) {
					want.Insert(id)
				}
			}
			if got := s.available(r); !got.Equal(want) {
				t.Fatalf("step %d: Available(%s) = %v, want %v", step, r, sets.List(got), sets.List(want))
			}
		}
		got, want := s.Prepared().Data(), referenceSnapshot(s, committedAt)
		if !reflect.DeepEqual(got.PodDeviceEntries, want.PodDeviceEntries) {
			t.Fatalf("step %d: entries\n got %v\nwant %v", step, got.PodDeviceEntries, want.PodDeviceEntries)
		}
		if !reflect.DeepEqual(got.RegisteredDevices, want.RegisteredDevices) {
			t.Fatalf("step %d: registered devices\n got %v\nwant %v", step, got.RegisteredDevices, want.RegisteredDevices)
		}
	}
}
