package devicemanager

import (
	"context"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kdm-project/kdm/deviceplugin/plugintest"
)

// referenceResources is Resources as it was before its views were kept between calls: every
// view built afresh from the state under mu. It is the oracle for the cached views.
func referenceResources(m *Manager) []ResourceView {
	m.mu.Lock()
	defer m.mu.Unlock()
	names := sets.New(m.st.Names()...)
	for res := range m.endpoints {
		names.Insert(res)
	}
	holders := m.holdersLocked()
	var out []ResourceView
	for _, res := range sets.List(names) {
		held := holders[res]
		ids := sets.New[string]()
		for id := range m.st.Devices(res) {
			ids.Insert(id)
		}
		healthy, unhealthy := m.st.Healthy(res), m.st.Unhealthy(res)
		ids = ids.Union(healthy).Union(unhealthy)
		for id := range held {
			ids.Insert(id)
		}
		devs := make([]DeviceView, 0, ids.Len())
		for _, id := range sets.List(ids) {
			d := DeviceView{ID: id, Health: DeviceUnknown, Reserved: slices.Contains(m.st.ReservedIDs(res), id)}
			switch {
			case healthy.Has(id):
				d.Health = DeviceHealthy
			case unhealthy.Has(id):
				d.Health = DeviceUnhealthy
			}
			dev, listed := m.st.Device(res, id)
			nodes := append([]int64(nil), dev.NUMANodes...)
			for _, h := range held[id] {
				d.Holders = append(d.Holders, h.key)
				if !listed {
					nodes = append(nodes, h.nodes...)
				}
			}
			d.NUMANodes = sets.List(sets.New(nodes...))
			devs = append(devs, d)
		}
		out = append(out, ResourceView{Name: res, Endpoint: m.endpointViewLocked(res), ReplacedStreams: len(m.replaced[res]), Devices: devs})
	}
	return out
}

// TestResourcesKeptViewsMatchReference follows Resources through changes of every kind that
// its views show (holders, health, a disconnect, a reservation in flight, a held device its
// plugin stops listing, NUMA nodes listed out of order) and checks each time that the views
// it keeps between calls are those built afresh.
func TestResourcesKeptViewsMatchReference(t *testing.T) {
	// The manager's clock stands still, so that both views count the same grace period.
	f := newAllocFixture(t, Config{Clock: clocktesting.NewFakeClock(time.Now())})
	const other = "example.com/other"
	numa := []*pluginapi.Device{numaDevice("g0", 1, 0), numaDevice("g1", 0), numaDevice("g2", 1, 1), numaDevice("g3")}
	gpus := f.plugin(gpu, &pluginapi.DevicePluginOptions{}, numa)
	hanging := f.plugin(other, &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "o0", "o1"))
	check := func(step string) {
		t.Helper()
		got := f.m.Resources()
		if diff := cmp.Diff(referenceResources(f.m), got); diff != "" {
			t.Fatalf("%s: Resources (-fresh +kept):\n%s", step, diff)
		}
		if diff := cmp.Diff(got, f.m.Resources()); diff != "" {
			t.Fatalf("%s: a second call differs (-first +second):\n%s", step, diff)
		}
	}
	check("start")
	p1 := testPod("p1", container("c", map[string]int64{gpu: 2}))
	if err := f.admit(p1); err != nil {
		t.Fatal(err)
	}
	check("p1 holds two GPUs")
	if err := gpus.SetHealth("g1", pluginapi.Unhealthy); err != nil {
		t.Fatal(err)
	}
	waitFor(t, f.m, "g1 unhealthy", func() bool { return capacityIs(f.m, gpu, 4, 3) })
	check("g1 unhealthy")

	hanging.SetFaults(plugintest.Faults{HangAllocate: true})
	ctx, cancel := context.WithCancel(context.Background())
	stuck := testPod("stuck", container("c", map[string]int64{other: 1}))
	f.pods.add(stuck)
	done := make(chan error, 1)
	go func() { done <- f.m.Allocate(ctx, stuck, &stuck.Spec.Containers[0]) }()
	wctx, wcancel := context.WithTimeout(context.Background(), waitTimeout)
	defer wcancel()
	if err := hanging.WaitForCalls(wctx, func(c plugintest.Calls) bool { return len(c.Allocate) == 1 }); err != nil {
		t.Fatal(err)
	}
	check("a reservation in flight")
	if views := f.m.Resources(); !views[1].Devices[0].Reserved && !views[1].Devices[1].Reserved {
		t.Fatalf("no device of %s shows the reservation in flight: %+v", other, views[1].Devices)
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the cancelled Allocate succeeded")
	}
	check("the reservation released")

	dropped := sets.List(f.held(p1, "c", gpu))[0]
	var keep []*pluginapi.Device
	for _, d := range numa {
		if d.ID != dropped {
			keep = append(keep, d)
		}
	}
	gpus.SetDevices(keep)
	waitFor(t, f.m, "the shorter list", func() bool { c, _, _ := f.m.GetCapacity(); return quantity(c, gpu) == int64(len(keep)) })
	check("a held device no longer listed")

	gpus.Stop()
	waitFor(t, f.m, "the disconnect", func() bool { c, a, _ := f.m.GetCapacity(); return quantity(a, gpu) == 0 && quantity(c, gpu) > 0 })
	check("disconnected")
	f.pods.remove(string(p1.UID))
	f.m.UpdateAllocatedDevices()
	check("p1 gone")
}

// TestResourcesUnchangedCopiesNothing: once Resources has built the views of a large
// resource, calls that find its devices unchanged (nothing happened, or a pod of another
// resource was admitted) do not copy its devices again: their allocations do not grow with
// the number of devices. The agent calls Resources every second and the status page at every
// change; each copy of a million devices held the manager's lock for seconds and left
// hundreds of megabytes of garbage.
func TestResourcesUnchangedCopiesNothing(t *testing.T) {
	const n = 100_000
	f := newAllocFixture(t, Config{})
	f.plugin(gpu, &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "g0", "g1"))
	large := "example.com/large"
	testPlugin(t, f.dir, large, "large.sock", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, ids("dev-", n)...))
	waitFor(t, f.m, "the large resource", func() bool { return capacityIs(f.m, large, n, n) })
	if views := f.m.Resources(); len(views) != 2 || len(views[1].Devices) != n {
		t.Fatalf("Resources() = %d resources, want %s and %s with %d devices", len(views), gpu, large, n)
	}
	// A copy of the views alone is n DeviceViews of 88 bytes each.
	const bound = 256 << 10 // bytes per call, whatever n
	if b := allocated(f.m.Resources); b > bound {
		t.Errorf("a Resources call with nothing changed allocated %d bytes, want at most %d", b, bound)
	}
	if err := f.admit(testPod("p", container("c", map[string]int64{gpu: 1}))); err != nil {
		t.Fatal(err)
	}
	if b := allocated(f.m.Resources); b > bound {
		t.Errorf("the Resources call after a GPU pod's admission allocated %d bytes, want at most %d", b, bound)
	}
}

// TestResourcesReadsOnlyTheChangedResource: a health change of one small resource makes the
// next Resources call read that resource again, not a 100,000-device resource beside it,
// whose views are kept (the state's ListVersion is per resource).
func TestResourcesReadsOnlyTheChangedResource(t *testing.T) {
	const n = 100_000
	f := newAllocFixture(t, Config{})
	small := f.plugin(gpu, &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "g0", "g1"))
	large := "example.com/large"
	testPlugin(t, f.dir, large, "large.sock", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, ids("dev-", n)...))
	waitFor(t, f.m, "the large resource", func() bool { return capacityIs(f.m, large, n, n) })
	f.m.Resources()
	if err := small.SetHealth("g1", pluginapi.Unhealthy); err != nil {
		t.Fatal(err)
	}
	waitFor(t, f.m, "the small resource's health change", func() bool { return capacityIs(f.m, gpu, 2, 1) })
	const bound = 256 << 10 // reading the large resource again is about 20 MB
	if b := allocated(f.m.Resources); b > bound {
		t.Errorf("the Resources call after another resource's health change allocated %d bytes, want at most %d", b, bound)
	}
	views := f.m.Resources()
	if views[0].Name != gpu || views[0].Devices[1].Health != DeviceUnhealthy {
		t.Fatalf("the changed resource's views were not rebuilt: %+v", views[0].Devices)
	}
}

// allocated returns the bytes of heap fn allocates (with any other goroutine meanwhile).
func allocated[T any](fn func() T) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}
