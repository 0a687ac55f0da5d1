package devicemanager

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/deviceplugin"
	"github.com/kdm-project/kdm/deviceplugin/plugintest"
)

// podList is a concurrency-safe set of active pods for Sources.
type podList struct {
	mu   sync.Mutex
	pods map[string]*v1.Pod
}

func newPodList() *podList { return &podList{pods: map[string]*v1.Pod{}} }

func (l *podList) add(p *v1.Pod) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pods[string(p.UID)] = p
}

func (l *podList) remove(uid string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.pods, uid)
}

func (l *podList) active() []*v1.Pod {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]*v1.Pod, 0, len(l.pods))
	for _, p := range l.pods {
		out = append(out, p)
	}
	return out
}

// envAllocator answers Allocate with <NAME>=ids, one /dev/<id> device spec per device and one
// mount per container request.
func envAllocator(name string) func(*deviceplugin.Config) {
	return func(c *deviceplugin.Config) {
		c.Allocate = func(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
			resp := &pluginapi.AllocateResponse{}
			for _, cr := range req.ContainerRequests {
				r := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{name: strings.Join(cr.DevicesIds, ",")}}
				for _, id := range cr.DevicesIds {
					r.Devices = append(r.Devices, &pluginapi.DeviceSpec{HostPath: "/dev/" + id, ContainerPath: "/dev/" + id, Permissions: "rw"})
				}
				r.Mounts = append(r.Mounts, &pluginapi.Mount{HostPath: "/opt/" + name, ContainerPath: "/usr/local/" + name, ReadOnly: true})
				resp.ContainerResponses = append(resp.ContainerResponses, r)
			}
			return resp, nil
		}
	}
}

// allocFixture is a started manager with active-pod tracking.
type allocFixture struct {
	t       *testing.T
	dir     string
	m       *Manager
	pods    *podList
	plugins []*plugintest.Plugin
}

// pluginsStopped returns the fixture's plugins (to stop them before a restart).
func (f *allocFixture) pluginsStopped() []*plugintest.Plugin { return f.plugins }

func newAllocFixture(t *testing.T, cfg Config) *allocFixture {
	f := &allocFixture{t: t, dir: shortDir(t), pods: newPodList()}
	f.m = testManager(t, f.dir, cfg, Sources{ActivePods: f.pods.active})
	return f
}

func (f *allocFixture) plugin(res string, opts *pluginapi.DevicePluginOptions, devs []*pluginapi.Device, mutate ...func(*deviceplugin.Config)) *plugintest.Plugin {
	f.t.Helper()
	healthy := 0
	for _, d := range devs {
		if d.Health == pluginapi.Healthy {
			healthy++
		}
	}
	sock := strings.ReplaceAll(res, "/", "_") + ".sock"
	p := testPlugin(f.t, f.dir, res, sock, opts, devs, append([]func(*deviceplugin.Config){envAllocator("ENV_" + strings.ToUpper(strings.NewReplacer(".", "_", "/", "_").Replace(res)))}, mutate...)...)
	waitFor(f.t, f.m, res+" devices", func() bool { return capacityIs(f.m, res, int64(len(devs)), int64(healthy)) })
	f.plugins = append(f.plugins, p)
	return p
}

// admit allocates every container of the pod, init containers first, as the kubelet does.
func (f *allocFixture) admit(pod *v1.Pod) error {
	f.pods.add(pod)
	for i := range pod.Spec.InitContainers {
		if err := f.m.Allocate(context.Background(), pod, &pod.Spec.InitContainers[i]); err != nil {
			return err
		}
	}
	for i := range pod.Spec.Containers {
		if err := f.m.Allocate(context.Background(), pod, &pod.Spec.Containers[i]); err != nil {
			return err
		}
	}
	return nil
}

func (f *allocFixture) held(pod *v1.Pod, container, res string) sets.Set[string] {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	return f.m.st.ContainerDevices(string(pod.UID), container, res)
}

func TestPodContainerDeviceAllocation(t *testing.T) {
	f := newAllocFixture(t, Config{})
	r1, r2 := "example.com/r1", "example.com/r2"
	f.plugin(r1, &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "a1", "a2"))
	f.plugin(r2, &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "b1", "b2"))

	p1 := testPod("p1", container("c", map[string]int64{r1: 2, r2: 1}))
	if err := f.admit(p1); err != nil {
		t.Fatalf("admit p1: %v", err)
	}
	opts, err := f.m.GetDeviceRunContainerOptions(context.Background(), p1, &p1.Spec.Containers[0])
	if err != nil || opts == nil {
		t.Fatalf("run options: %v, %v", opts, err)
	}
	if len(opts.Devices) != 3 || len(opts.Mounts) != 2 || len(opts.Envs) != 2 {
		t.Fatalf("run options: %d devices, %d mounts, %d envs; want 3, 2, 2: %+v", len(opts.Devices), len(opts.Mounts), len(opts.Envs), opts)
	}

	p2 := testPod("p2", container("c", map[string]int64{r1: 1}))
	err = f.admit(p2)
	want := "requested number of devices unavailable for example.com/r1. Requested: 1, Available: 0"
	if err == nil || err.Error() != want {
		t.Fatalf("admit p2: got %v, want %q", err, want)
	}
	if opts, err := f.m.GetDeviceRunContainerOptions(context.Background(), p2, &p2.Spec.Containers[0]); err == nil && opts != nil {
		// p2 is active and has no cached allocation, so options re-allocate; with nothing
		// free that fails, never returning options for devices it does not hold.
		t.Fatalf("run options of a rejected pod: %+v", opts)
	}
	f.pods.remove("p2")

	p3 := testPod("p3", container("c", map[string]int64{r2: 1}))
	if err := f.admit(p3); err != nil {
		t.Fatalf("admit p3 (the remaining device): %v", err)
	}
	if got := f.held(p3, "c", r2); !got.Equal(sets.New("b2")) {
		t.Fatalf("p3 holds %v, want b2", got)
	}
}

func TestPodContainerDeviceToAllocate(t *testing.T) {
	f := newAllocFixture(t, Config{})
	r1, r2, r3 := "example.com/r1", "example.com/r2", "example.com/r3"
	f.plugin(r1, &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "a1", "a2"))
	f.plugin(r2, &pluginapi.DevicePluginOptions{}, devices(pluginapi.Unhealthy, "b1"))
	p := f.plugin(r3, &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "c1", "c2"))

	if err := f.admit(testPod("held", container("c", map[string]int64{r3: 2}))); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, res string
		want      string
	}{
		{"no healthy devices", r2, "no healthy devices present; cannot allocate unhealthy devices example.com/r2"},
		{"unregistered", "example.com/none", ""}, // not a device-plugin resource: ignored
	}
	for _, tc := range cases {
		err := f.admit(testPod(tc.name, container("c", map[string]int64{tc.res: 1})))
		if (tc.want == "" && err != nil) || (tc.want != "" && (err == nil || err.Error() != tc.want)) {
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
	}
	pod := testPod("held", container("c", map[string]int64{r3: 2}))
	_, err := f.m.devicesToAllocate(context.Background(), pod, "c", "example.com/never", 1, nil)
	if err == nil || err.Error() != "cannot allocate unregistered device example.com/never" {
		t.Errorf("unregistered resource: got %v", err)
	}
	// A device the container holds turns unhealthy: its cached allocation is no longer valid.
	if err := p.SetHealth("c1", pluginapi.Unhealthy); err != nil {
		t.Fatal(err)
	}
	waitFor(t, f.m, "c1 unhealthy", func() bool { return capacityIs(f.m, r3, 2, 1) })
	_, err = f.m.devicesToAllocate(context.Background(), pod, "c", r3, 2, nil)
	if err == nil || err.Error() != "previously allocated devices are no longer healthy; cannot allocate unhealthy devices example.com/r3" {
		t.Errorf("unhealthy cached device: got %v", err)
	}
	_, err = f.m.devicesToAllocate(context.Background(), pod, "c", r3, 1, nil)
	if err == nil || err.Error() != `pod "held" container "c" changed request for resource "example.com/r3" from 2 to 1` {
		t.Errorf("changed request: got %v", err)
	}
}

func TestInitContainerDeviceAllocation(t *testing.T) {
	f := newAllocFixture(t, Config{})
	f.plugin(gpu, &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, ids("g", 4)...))
	pod := testPod("p", container("app1", map[string]int64{gpu: 1}), container("app2", map[string]int64{gpu: 1}))
	pod.Spec.InitContainers = []v1.Container{container("init1", map[string]int64{gpu: 1}), container("init2", map[string]int64{gpu: 2})}
	if err := f.admit(pod); err != nil {
		t.Fatal(err)
	}
	init1, init2 := f.held(pod, "init1", gpu), f.held(pod, "init2", gpu)
	app1, app2 := f.held(pod, "app1", gpu), f.held(pod, "app2", gpu)
	if init1.Len() != 1 || init2.Len() != 2 || app1.Len() != 1 || app2.Len() != 1 {
		t.Fatalf("sizes: init1 %v init2 %v app1 %v app2 %v", init1, init2, app1, app2)
	}
	if !init2.IsSuperset(init1) || !init2.IsSuperset(app1.Union(app2)) || app1.Intersection(app2).Len() != 0 {
		t.Fatalf("reuse relations broken: init1 %v init2 %v app1 %v app2 %v", init1, init2, app1, app2)
	}
}

func TestRestartableInitContainerDeviceAllocation(t *testing.T) {
	f := newAllocFixture(t, Config{})
	f.plugin(gpu, &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, ids("g", 6)...))
	always := v1.ContainerRestartPolicyAlways
	side1, side2 := container("sidecar1", map[string]int64{gpu: 1}), container("sidecar2", map[string]int64{gpu: 2})
	side1.RestartPolicy, side2.RestartPolicy = &always, &always
	pod := testPod("p", container("app1", map[string]int64{gpu: 1}), container("app2", map[string]int64{gpu: 2}))
	pod.Spec.InitContainers = []v1.Container{container("init", map[string]int64{gpu: 3}), side1, side2}
	if err := f.admit(pod); err != nil {
		t.Fatal(err)
	}
	init := f.held(pod, "init", gpu)
	users := []sets.Set[string]{f.held(pod, "sidecar1", gpu), f.held(pod, "sidecar2", gpu), f.held(pod, "app1", gpu), f.held(pod, "app2", gpu)}
	if !init.IsSuperset(users[0].Union(users[1])) {
		t.Errorf("sidecars %v %v not drawn from the init container's %v", users[0], users[1], init)
	}
	for i := range users {
		for j := i + 1; j < len(users); j++ {
			if users[i].Intersection(users[j]).Len() != 0 {
				t.Errorf("containers %d and %d share devices: %v %v", i, j, users[i], users[j])
			}
		}
	}
}

func TestGetDeviceRunContainerOptions(t *testing.T) {
	f := newAllocFixture(t, Config{})
	r1, r2 := "example.com/r1", "example.com/r2"
	f.plugin(r1, &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "a1", "a2"))
	f.plugin(r2, &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "b1"))
	pod := testPod("p", container("c", map[string]int64{r1: 2, r2: 1}))
	if err := f.admit(pod); err != nil {
		t.Fatal(err)
	}
	opts, err := f.m.GetDeviceRunContainerOptions(context.Background(), pod, &pod.Spec.Containers[0])
	if err != nil || opts == nil || len(opts.Devices) != 3 || len(opts.Mounts) != 2 || len(opts.Envs) != 2 {
		t.Fatalf("options of an active pod: %+v, %v", opts, err)
	}
	f.pods.remove("p")
	f.m.UpdateAllocatedDevices()
	opts, err = f.m.GetDeviceRunContainerOptions(context.Background(), pod, &pod.Spec.Containers[0])
	if err != nil || opts != nil {
		t.Fatalf("options of a removed pod: %+v, %v; want nil, nil", opts, err)
	}
}

func TestDevicePreStartContainer(t *testing.T) {
	f := newAllocFixture(t, Config{})
	p := f.plugin(gpu, &pluginapi.DevicePluginOptions{PreStartRequired: true}, devices(pluginapi.Healthy, "g1", "g2", "g3"))
	pod := testPod("p", container("c", map[string]int64{gpu: 2}))
	if err := f.admit(pod); err != nil {
		t.Fatal(err)
	}
	opts, err := f.m.GetDeviceRunContainerOptions(context.Background(), pod, &pod.Spec.Containers[0])
	if err != nil {
		t.Fatal(err)
	}
	calls := p.Calls()
	if len(calls.PreStart) != 1 {
		t.Fatalf("PreStartContainer calls: %d, want 1", len(calls.PreStart))
	}
	got := append([]string(nil), calls.PreStart[0].DevicesIds...)
	sort.Strings(got)
	if want := sets.List(f.held(pod, "c", gpu)); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("PreStartContainer got %v, want the allocated %v", got, want)
	}
	if len(opts.Devices) != 2 || len(opts.Envs) != 1 {
		t.Fatalf("options %+v do not match the Allocate response", opts)
	}
	zero := testPod("z", container("c", map[string]int64{gpu: 0}))
	if err := f.admit(zero); err != nil {
		t.Fatal(err)
	}
	if _, err := f.m.GetDeviceRunContainerOptions(context.Background(), zero, &zero.Spec.Containers[0]); err != nil {
		t.Fatal(err)
	}
	if n := len(p.Calls().PreStart); n != 1 {
		t.Fatalf("a 0-quantity request called PreStartContainer (%d calls)", n)
	}
}

func TestSanitizeNodeAllocatable(t *testing.T) {
	f := newAllocFixture(t, Config{})
	r1, r2 := "example.com/r1", "example.com/r2"
	f.plugin(r1, &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "a1", "a2"))
	f.plugin(r2, &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "b1", "b2", "b3"))
	pod := testPod("p", container("c", map[string]int64{r1: 2, r2: 1}))
	if err := f.admit(pod); err != nil {
		t.Fatal(err)
	}
	in := v1.ResourceList{v1.ResourceName(r2): *resourceQuantity(5)}
	out := f.m.SanitizeNodeAllocatable("p", in)
	if quantity(out, r1) != 2 || quantity(out, r2) != 5 {
		t.Fatalf("sanitized %v: want r1 raised to 2, r2 left at 5", out)
	}
	if quantity(in, r1) != -1 {
		t.Fatalf("input modified: %v", in)
	}
	if got := f.m.SanitizeNodeAllocatable("other", in); quantity(got, r1) != -1 {
		t.Fatalf("pod without devices got a sanitized list: %v", got)
	}
}

func TestAdmitPodWithDRAResources(t *testing.T) {
	f := newAllocFixture(t, Config{})
	f.plugin(gpu, &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "g1"))
	pod := testPod("p", container("c", map[string]int64{gpu: 2}))
	pod.Status.ExtendedResourceClaimStatus = &v1.PodExtendedResourceClaimStatus{
		RequestMappings: []v1.ContainerExtendedResourceRequest{{ContainerName: "c", ResourceName: gpu, RequestName: "r"}},
	}
	if err := f.admit(pod); err != nil {
		t.Fatalf("DRA-backed request went to the device plugin: %v", err)
	}
	pod.Status.ExtendedResourceClaimStatus = nil
	if err := f.admit(pod); err == nil {
		t.Fatalf("an unmapped request for 2 of 1 devices succeeded")
	}
}

// TestFailedAllocationLeavesNoTrace: an Allocate RPC error or a failing GetPreferredAllocation
// releases every reservation, so the next pod can have the devices (kubernetes #130145).
func TestFailedAllocationLeavesNoTrace(t *testing.T) {
	f := newAllocFixture(t, Config{})
	p := f.plugin(gpu, &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}, devices(pluginapi.Healthy, "g1", "g2"))
	nic := "example.com/nic"
	pn := f.plugin(nic, &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "n1"))

	p.SetFaults(plugintest.Faults{PreferredErr: errors.New("gpu fell off the bus")})
	err := f.admit(testPod("a", container("c", map[string]int64{gpu: 1})))
	if err == nil || !strings.Contains(err.Error(), "device plugin GetPreferredAllocation rpc failed with err:") {
		t.Fatalf("admit with failing GetPreferredAllocation: %v", err)
	}
	p.SetFaults(plugintest.Faults{})

	// Two resources; the second one's Allocate fails: the first must be rolled back too.
	pn.SetFaults(plugintest.Faults{AllocateErr: errors.New("nic busy")})
	pod := testPod("b", container("c", map[string]int64{gpu: 2, nic: 1}))
	if err := f.admit(pod); err == nil {
		t.Fatalf("admit with a failing Allocate succeeded")
	}
	if held := f.held(pod, "c", gpu); held != nil {
		t.Fatalf("a failed allocation recorded %v", held)
	}
	f.m.mu.Lock()
	pending, allocated := f.m.st.Reservations(), f.m.st.AllocatedCount(gpu)
	f.m.mu.Unlock()
	if pending != 0 || allocated != 0 {
		t.Fatalf("after failures: %d pending reservations, %d allocated", pending, allocated)
	}
	pn.SetFaults(plugintest.Faults{})
	if err := f.admit(testPod("c", container("c", map[string]int64{gpu: 2, nic: 1}))); err != nil {
		t.Fatalf("devices leaked by earlier failures: %v", err)
	}
}

func TestPreferredAllocationFallback(t *testing.T) {
	f := newAllocFixture(t, Config{Policy: Policy{PreferredAllocationFallback: true}})
	p := f.plugin(gpu, &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}, devices(pluginapi.Healthy, "g1", "g2"))
	p.SetFaults(plugintest.Faults{PreferredErr: errors.New("nvml error")})
	pod := testPod("a", container("c", map[string]int64{gpu: 1}))
	if err := f.admit(pod); err != nil {
		t.Fatalf("with fallback, a failing GetPreferredAllocation failed admission: %v", err)
	}
	if f.held(pod, "c", gpu).Len() != 1 {
		t.Fatalf("no device allocated")
	}
}
