package devicemanager

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/checkpoint"
	"github.com/kdm-project/kdm/deviceplugin"
	"github.com/kdm-project/kdm/endpoint"
	"github.com/kdm-project/kdm/internal/state"
)

// fixedAffinity returns the same hint for every container.
type fixedAffinity struct{ hint TopologyHint }

func (f fixedAffinity) GetAffinity(string, string) TopologyHint { return f.hint }

// seed installs a resource's devices directly, with a stopped endpoint: enough for the
// algorithms that make no RPC.
func seed(m *Manager, res string, devs ...*pluginapi.Device) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ep := endpoint.NewStopped(res, m.cfg.Endpoint)
	m.endpoints[res] = endpointInfo{ep: ep}
	m.st.AddRestored(res, ep.StopTime())
	m.st.ApplyDeviceList(res, devs)
}

// hold records an allocation directly.
func hold(m *Manager, podUID, container, res string, ids ...string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.st.Commit(podUID, container, res, nil, checkpoint.DevicesPerNUMA{state.NoTopology: ids}, &pluginapi.ContainerAllocateResponse{})
}

func hint(preferred bool, nodes ...int) TopologyHint {
	return TopologyHint{NUMANodes: nodes, Preferred: preferred}
}

func TestGetTopologyHints(t *testing.T) {
	r1, r2 := "example.com/r1", "example.com/r2"
	cases := []struct {
		name      string
		devices   map[string][]*pluginapi.Device
		allocated map[string][]string // resource → IDs already held by this container
		others    map[string][]string // resource → IDs held by another pod
		request   map[string]int64
		want      map[string][]TopologyHint
	}{
		{name: "no topology", devices: map[string][]*pluginapi.Device{r1: {numaDevice("a")}},
			request: map[string]int64{r1: 1}, want: map[string][]TopologyHint{r1: nil}},
		{name: "one device with topology", devices: map[string][]*pluginapi.Device{r1: {numaDevice("a", 1)}},
			request: map[string]int64{r1: 1}, want: map[string][]TopologyHint{r1: {hint(true, 1)}}},
		{name: "one device per node", devices: map[string][]*pluginapi.Device{r1: {numaDevice("a", 0), numaDevice("b", 1)}},
			request: map[string]int64{r1: 1}, want: map[string][]TopologyHint{r1: {hint(true, 0), hint(true, 1), hint(false, 0, 1)}}},
		{name: "request 2, one per node", devices: map[string][]*pluginapi.Device{r1: {numaDevice("a", 0), numaDevice("b", 1)}},
			request: map[string]int64{r1: 2}, want: map[string][]TopologyHint{r1: {hint(true, 0, 1)}}},
		{name: "two per node", devices: map[string][]*pluginapi.Device{r1: {numaDevice("a", 0), numaDevice("b", 0), numaDevice("c", 1), numaDevice("d", 1)}},
			request: map[string]int64{r1: 2}, want: map[string][]TopologyHint{r1: {hint(true, 0), hint(true, 1), hint(false, 0, 1)}}},
		{name: "forced cross-NUMA", devices: map[string][]*pluginapi.Device{r1: {numaDevice("a", 0), numaDevice("b", 0), numaDevice("c", 1), numaDevice("d", 1)}},
			others: map[string][]string{r1: {"a", "c"}}, request: map[string]int64{r1: 2},
			want: map[string][]TopologyHint{r1: {hint(false, 0, 1)}}},
		{name: "two resources", devices: map[string][]*pluginapi.Device{
			r1: {numaDevice("a", 0), numaDevice("b", 1)}, r2: {numaDevice("c", 0), numaDevice("d", 0), numaDevice("e", 1), numaDevice("f", 1)}},
			request: map[string]int64{r1: 1, r2: 2},
			want: map[string][]TopologyHint{r1: {hint(true, 0), hint(true, 1), hint(false, 0, 1)},
				r2: {hint(true, 0), hint(true, 1), hint(false, 0, 1)}}},
		{name: "more than available", devices: map[string][]*pluginapi.Device{r1: {numaDevice("a", 0), numaDevice("b", 1)}},
			request: map[string]int64{r1: 3}, want: map[string][]TopologyHint{r1: {}}},
		{name: "already allocated: regenerated from its devices", devices: map[string][]*pluginapi.Device{r1: {numaDevice("a", 0), numaDevice("b", 0), numaDevice("c", 1)}},
			allocated: map[string][]string{r1: {"a"}}, request: map[string]int64{r1: 1},
			want: map[string][]TopologyHint{r1: {hint(true, 0), hint(false, 0, 1)}}},
		{name: "already allocated: fewer than requested", devices: map[string][]*pluginapi.Device{r1: {numaDevice("a", 0), numaDevice("b", 1)}},
			allocated: map[string][]string{r1: {"a"}}, request: map[string]int64{r1: 2}, want: map[string][]TopologyHint{r1: {}}},
		{name: "already allocated: more than requested", devices: map[string][]*pluginapi.Device{r1: {numaDevice("a", 0), numaDevice("b", 1)}},
			allocated: map[string][]string{r1: {"a", "b"}}, request: map[string]int64{r1: 1}, want: map[string][]TopologyHint{r1: {}}},
		{name: "devices on one node only: no mask over device-less nodes (1.36)", devices: map[string][]*pluginapi.Device{r1: {numaDevice("a", 0), numaDevice("b", 0)}},
			request: map[string]int64{r1: 1}, want: map[string][]TopologyHint{r1: {hint(true, 0)}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, err := New(Config{PluginDir: shortDir(t), NUMANodes: []int{0, 1}})
			if err != nil {
				t.Fatal(err)
			}
			for res, devs := range tc.devices {
				seed(m, res, devs...)
			}
			for res, ids := range tc.allocated {
				hold(m, "pod", "c", res, ids...)
			}
			for res, ids := range tc.others {
				hold(m, "other", "c", res, ids...)
			}
			m.sources = Sources{SourcesReady: func() bool { return false }} // keep the test's allocations
			c := container("c", tc.request)
			got := m.GetTopologyHints(testPod("pod", c), &c)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("hints (-want +got):\n%s", diff)
			}
		})
	}
}

// TestGenerateHintsManyNUMANodes: a 34-node machine with devices on two nodes yields the three
// masks over those nodes, not 2^34 (kubernetes #135541).
func TestGenerateHintsManyNUMANodes(t *testing.T) {
	var nodes []int
	for i := 0; i < 34; i++ {
		nodes = append(nodes, i)
	}
	m, _ := New(Config{PluginDir: "/x", NUMANodes: nodes})
	seed(m, "r", numaDevice("a", 5), numaDevice("b", 30))
	c := container("c", map[string]int64{"r": 1})
	got := m.GetTopologyHints(testPod("p", c), &c)["r"]
	want := []TopologyHint{hint(true, 5), hint(true, 30), hint(false, 5, 30)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("hints (-want +got):\n%s", diff)
	}
}

// TestTopologyAlignedAllocation: allocation takes aligned devices first and spills over only
// as needed; preferred IDs outside the candidates are ignored.
func TestTopologyAlignedAllocation(t *testing.T) {
	cases := []struct {
		name      string
		devs      []*pluginapi.Device
		hint      []int
		request   int64
		preferred []string
		wantNodes map[int]int // NUMA node → count of allocated devices on it
	}{
		{"aligned single node", []*pluginapi.Device{numaDevice("a", 0), numaDevice("b", 1), numaDevice("c", 1)}, []int{1}, 2, nil, map[int]int{1: 2}},
		{"spill over", []*pluginapi.Device{numaDevice("a", 0), numaDevice("b", 0), numaDevice("c", 0), numaDevice("d", 1), numaDevice("e", 1)}, []int{0}, 4, nil, map[int]int{0: 3, 1: 1}},
		{"preferred aligned accepted", []*pluginapi.Device{numaDevice("a", 0), numaDevice("b", 0), numaDevice("c", 0)}, []int{0}, 1, []string{"c"}, map[int]int{0: 1}},
		{"bogus preferred ignored", []*pluginapi.Device{numaDevice("a", 0), numaDevice("b", 1)}, []int{1}, 1, []string{"zz", "a"}, map[int]int{1: 1}},
		{"multi-node hint", []*pluginapi.Device{numaDevice("a", 0), numaDevice("b", 1), numaDevice("c", 2)}, []int{0, 2}, 2, nil, map[int]int{0: 1, 2: 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newAllocFixture(t, Config{TopologyAffinity: fixedAffinity{hint(true, tc.hint...)}})
			pref := tc.preferred
			f.plugin(gpu, &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}, tc.devs, func(c *deviceplugin.Config) {
				c.GetPreferredAllocation = func(_ context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
					return &pluginapi.PreferredAllocationResponse{ContainerResponses: []*pluginapi.ContainerPreferredAllocationResponse{{DeviceIDs: pref}}}, nil
				}
			})
			pod := testPod("p", container("c", map[string]int64{gpu: tc.request}))
			if err := f.admit(pod); err != nil {
				t.Fatal(err)
			}
			got := map[int]int{}
			for _, nodes := range f.m.GetDevices("p", "c")[gpu] {
				for _, n := range nodes {
					got[int(n)]++
				}
			}
			if diff := cmp.Diff(tc.wantNodes, got); diff != "" {
				t.Fatalf("devices per node (-want +got):\n%s", diff)
			}
			if len(tc.preferred) == 1 && tc.name == "preferred aligned accepted" {
				if _, ok := f.m.GetDevices("p", "c")[gpu]["c"]; !ok {
					t.Fatalf("preferred aligned device c not chosen: %v", f.m.GetDevices("p", "c"))
				}
			}
		})
	}
}

// TestGetPreferredAllocationParameters: the plugin is asked with the available set, the
// devices already taken from the reuse pool as must-include, and the total request as size.
func TestGetPreferredAllocationParameters(t *testing.T) {
	f := newAllocFixture(t, Config{})
	p := f.plugin(gpu, &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}, devices(pluginapi.Healthy, "a", "b", "c", "d"))
	pod := testPod("p", container("app", map[string]int64{gpu: 3}))
	pod.Spec.InitContainers = []v1.Container{container("init", map[string]int64{gpu: 1})}
	hold(f.m, "other", "c", gpu, "d")
	f.pods.add(testPod("other"))
	if err := f.admit(pod); err != nil {
		t.Fatal(err)
	}
	calls := p.Calls().Preferred
	if len(calls) != 2 {
		t.Fatalf("%d GetPreferredAllocation calls, want 2", len(calls))
	}
	init := sets.List(f.held(pod, "init", gpu))
	last := calls[1].ContainerRequests[0]
	if last.AllocationSize != 3 || fmt.Sprint(last.MustIncludeDeviceIDs) != fmt.Sprint(init) {
		t.Fatalf("app request: size %d mustInclude %v; want 3 and the init container's %v", last.AllocationSize, last.MustIncludeDeviceIDs, init)
	}
	avail := sets.New(last.AvailableDeviceIDs...)
	if avail.Has("d") || !avail.IsSuperset(sets.New(init...)) || avail.Len() != 3 {
		t.Fatalf("available %v: want the 3 devices not held by another pod, including the reused one", last.AvailableDeviceIDs)
	}
}

func TestGetPodDeviceRequest(t *testing.T) {
	always := v1.ContainerRestartPolicyAlways
	side := container("side", map[string]int64{"r": 1})
	side.RestartPolicy = &always
	cases := []struct {
		name string
		pod  *v1.Pod
		want int
	}{
		{"init peak wins", podWith([]v1.Container{container("i1", map[string]int64{"r": 2}), container("i2", map[string]int64{"r": 3})},
			container("a1", map[string]int64{"r": 1}), container("a2", map[string]int64{"r": 1})), 3},
		{"apps win", podWith([]v1.Container{container("i1", map[string]int64{"r": 2})},
			container("a1", map[string]int64{"r": 3}), container("a2", map[string]int64{"r": 3})), 6},
		{"sidecar counts in both", podWith([]v1.Container{side, container("i", map[string]int64{"r": 2})},
			container("a", map[string]int64{"r": 1})), 3},
	}
	for _, tc := range cases {
		if got := podDeviceRequests(tc.pod)["r"]; got != tc.want {
			t.Errorf("%s: got %d, want %d", tc.name, got, tc.want)
		}
	}
}

func podWith(inits []v1.Container, apps ...v1.Container) *v1.Pod {
	p := testPod("p", apps...)
	p.Spec.InitContainers = inits
	return p
}

// TestGetTopologyHintsWithUpdates: hint generation races device updates without data races
// or panics (run with -race).
func TestGetTopologyHintsWithUpdates(t *testing.T) {
	dir := shortDir(t)
	m := testManager(t, dir, Config{NUMANodes: []int{0, 1}}, Sources{})
	devs := make([]*pluginapi.Device, 1000)
	for i := range devs {
		devs[i] = numaDevice(fmt.Sprintf("d%d", i), int64(i%2))
	}
	p := testPlugin(t, dir, gpu, "gpu.sock", &pluginapi.DevicePluginOptions{}, devs)
	waitFor(t, m, "devices", func() bool { return capacityIs(m, gpu, 1000, 1000) })
	c := container("c", map[string]int64{gpu: 1})
	pod := testPod("p", c)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := 0; i < 20; i++ {
			_ = p.SetHealth(fmt.Sprintf("d%d", i), pluginapi.Unhealthy)
		}
	}()
	go func() {
		defer wg.Done()
		for i := 0; i < 20; i++ {
			if h := m.GetTopologyHints(pod, &c); len(h[gpu]) == 0 {
				t.Errorf("no hints for a satisfiable request")
				return
			}
			m.GetPodTopologyHints(pod)
		}
	}()
	wg.Wait()
}

// TestGetPodTopologyHints: pod scope sums app containers and sidecars against the init peak,
// ignores unregistered resources, and counts devices already held by any container.
func TestGetPodTopologyHints(t *testing.T) {
	r1, r2 := "example.com/r1", "example.com/r2"
	newM := func() *Manager {
		m, _ := New(Config{PluginDir: "/x", NUMANodes: []int{0, 1}})
		seed(m, r1, numaDevice("a", 0), numaDevice("b", 0), numaDevice("c", 1), numaDevice("d", 1))
		seed(m, r2, numaDevice("x", 0), numaDevice("y", 1))
		m.sources = Sources{SourcesReady: func() bool { return false }}
		return m
	}
	t.Run("two resources across three containers, one unregistered", func(t *testing.T) {
		m := newM()
		pod := testPod("p", container("c1", map[string]int64{r1: 1}), container("c2", map[string]int64{r1: 1, r2: 1}),
			container("c3", map[string]int64{"example.com/none": 1}))
		want := map[string][]TopologyHint{
			r1: {hint(true, 0), hint(true, 1), hint(false, 0, 1)},
			r2: {hint(true, 0), hint(true, 1), hint(false, 0, 1)},
		}
		if diff := cmp.Diff(want, m.GetPodTopologyHints(pod)); diff != "" {
			t.Fatalf("hints (-want +got):\n%s", diff)
		}
	})
	t.Run("init peak larger than apps", func(t *testing.T) {
		m := newM()
		pod := podWith([]v1.Container{container("init", map[string]int64{r1: 3})}, container("app", map[string]int64{r1: 1}))
		want := map[string][]TopologyHint{r1: {hint(true, 0, 1)}}
		if diff := cmp.Diff(want, m.GetPodTopologyHints(pod)); diff != "" {
			t.Fatalf("hints (-want +got):\n%s", diff)
		}
	})
	t.Run("forced cross-NUMA at pod level", func(t *testing.T) {
		m := newM()
		hold(m, "other", "c", r1, "a", "c")
		pod := testPod("p", container("c1", map[string]int64{r1: 1}), container("c2", map[string]int64{r1: 1}))
		want := map[string][]TopologyHint{r1: {hint(false, 0, 1)}}
		if diff := cmp.Diff(want, m.GetPodTopologyHints(pod)); diff != "" {
			t.Fatalf("hints (-want +got):\n%s", diff)
		}
	})
	t.Run("already allocated to the pod", func(t *testing.T) {
		m := newM()
		hold(m, "p", "c1", r1, "a")
		hold(m, "p", "c2", r1, "b")
		pod := testPod("p", container("c1", map[string]int64{r1: 1}), container("c2", map[string]int64{r1: 1}))
		want := map[string][]TopologyHint{r1: {hint(true, 0), hint(false, 0, 1)}}
		if diff := cmp.Diff(want, m.GetPodTopologyHints(pod)); diff != "" {
			t.Fatalf("hints (-want +got):\n%s", diff)
		}
	})
}

// TestHintsWithReusableDevices: reusable devices with topology must touch a mask for it to be
// offered; they count towards the request.
func TestHintsWithReusableDevices(t *testing.T) {
	m, _ := New(Config{PluginDir: "/x", NUMANodes: []int{0, 1}})
	seed(m, gpu, numaDevice("a", 0), numaDevice("b", 1), numaDevice("c", 1))
	hold(m, "p", "init", gpu, "a")
	m.st.NewContainerSteps("p", "init", true, nil).Next(m.st) // the init container's devices become reusable
	m.sources = Sources{SourcesReady: func() bool { return false }}
	c := container("app", map[string]int64{gpu: 2})
	got := m.GetTopologyHints(testPod("p", c), &c)[gpu]
	// a (node 0) is reusable: every hint must contain node 0; {0} alone holds only a.
	want := []TopologyHint{hint(false, 0, 1)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("hints (-want +got):\n%s", diff)
	}
}
