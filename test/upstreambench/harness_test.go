package upstreambench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/kubernetes/pkg/kubelet/cm/containermap"
	kubeletdm "k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
	stub "k8s.io/kubernetes/pkg/kubelet/cm/devicemanager/plugin/v1beta1"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"

	"github.com/kdm-project/kdm/checkpoint"
	kdm "github.com/kdm-project/kdm/devicemanager"
)

// manager is what the benchmarks do with either implementation.
type manager interface {
	// allocate admits pod's one container.
	allocate(pod *v1.Pod) error
	// allocatable is the resource's allocatable count, as the node status would publish it.
	allocatable() int64
	// devices are the device IDs pod's container holds.
	devices(pod *v1.Pod) []string
	// stop stops the manager and waits for its goroutines.
	stop()
}

// starter starts one implementation's manager on the plugin directory dir, with pods as
// its pod source (always ready), and restores dir's checkpoint if there is one.
type starter func(tb testing.TB, dir string, pods *podList) manager

// implementation is one side of a comparison: its sub-benchmark name and its starter.
type implementation struct {
	name   string
	launch starter // leaves the manager running: its caller stops it
}

// start launches the side's manager and stops it at tb's cleanup.
func (i implementation) start(tb testing.TB, dir string, pods *podList) manager {
	m := i.launch(tb, dir, pods)
	tb.Cleanup(m.stop)
	return m
}

// kubeletSide is the kubelet v1.36 device manager.
func kubeletSide() implementation { return implementation{"kubelet", startKubelet} }

// kdmSide is kdm's device manager under policy p, reported as sub-benchmark name.
func kdmSide(name string, p kdm.Policy) implementation {
	return implementation{name, func(tb testing.TB, dir string, pods *podList) manager { return startKDM(tb, dir, pods, p) }}
}

// sides are the two implementations with kdm replaying the kubelet's policy.
func sides() []implementation {
	return []implementation{kubeletSide(), kdmSide("kdm", kdm.KubeletPolicy())}
}

// shortDir is a fresh directory with a path short enough for unix socket names
// (t.TempDir's can exceed the 108-byte limit under a long benchmark name).
func shortDir(tb testing.TB) string {
	tb.Helper()
	dir, err := os.MkdirTemp("", "ub")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// kubeletManager is the kubelet's ManagerImpl, built by NewKubeletManager.
type kubeletManager struct {
	m      *kubeletdm.ManagerImpl
	cancel context.CancelFunc
	done   chan struct{}
}

// allSourcesReady tells the kubelet's manager that every pod source has synced, so that
// its garbage collection runs (kdm: Sources.SourcesReady returning true).
type allSourcesReady struct{}

func (allSourcesReady) AddSource(string) {}
func (allSourcesReady) AllReady() bool   { return true }

// noAffinity is a topology manager store without a NUMA preference (kdm's nil
// TopologyAffinity). The kubelet's device manager only calls GetAffinity.
type noAffinity struct{}

func (noAffinity) GetAffinity(string, string) topologymanager.TopologyHint {
	return topologymanager.TopologyHint{}
}
func (noAffinity) GetPolicy() topologymanager.Policy { return nil }
func (noAffinity) Name() string                      { return "none" }

// startKubelet starts the kubelet's manager on dir as the kubelet's container manager does
// (Start with the pod source, no containers known to the runtime).
func startKubelet(tb testing.TB, dir string, pods *podList) manager {
	tb.Helper()
	m, err := NewKubeletManager(logr.Discard(), filepath.Join(dir, kdm.KubeletSocketName), nil, noAffinity{})
	if err != nil {
		tb.Fatalf("kubelet device manager: %v", err)
	}
	if err := m.Start(logr.Discard(), pods.active, allSourcesReady{}, containermap.NewContainerMap(), sets.New[string]()); err != nil {
		tb.Fatalf("starting the kubelet device manager: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	k := &kubeletManager{m: m, cancel: cancel, done: make(chan struct{})}
	go drain(ctx, m.Updates(), k.done) // the kubelet's pod workers read health updates
	return k
}

func (k *kubeletManager) allocate(pod *v1.Pod) error {
	return k.m.Allocate(pod, &pod.Spec.Containers[0])
}

func (k *kubeletManager) allocatable() int64 { return allocatableOf(k.m.GetCapacity) }

func (k *kubeletManager) devices(pod *v1.Pod) []string {
	return sortedIDs(k.m.GetDevices(string(pod.UID), pod.Spec.Containers[0].Name)[resourceName])
}

func (k *kubeletManager) stop() {
	select {
	case <-k.done:
		return
	default:
	}
	_ = k.m.Stop(logr.Discard())
	k.cancel()
	<-k.done
}

// kdmManager is kdm's Manager.
type kdmManager struct {
	m      *kdm.Manager
	cancel context.CancelFunc
	done   chan struct{}
}

// startKDM starts kdm's manager on dir under policy p, with the same pod source.
func startKDM(tb testing.TB, dir string, pods *podList, p kdm.Policy) manager {
	tb.Helper()
	m, err := kdm.New(kdm.Config{PluginDir: dir, Logger: logr.Discard(), Policy: p})
	if err != nil {
		tb.Fatalf("kdm device manager: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := m.Start(ctx, kdm.Sources{ActivePods: pods.active, SourcesReady: func() bool { return true }}); err != nil {
		cancel()
		tb.Fatalf("starting the kdm device manager: %v", err)
	}
	k := &kdmManager{m: m, cancel: cancel, done: make(chan struct{})}
	go drain(ctx, m.Updates(), k.done)
	return k
}

func (k *kdmManager) allocate(pod *v1.Pod) error {
	return k.m.Allocate(context.Background(), pod, &pod.Spec.Containers[0])
}

func (k *kdmManager) allocatable() int64 { return allocatableOf(k.m.GetCapacity) }

func (k *kdmManager) devices(pod *v1.Pod) []string {
	return sortedIDs(k.m.GetDevices(string(pod.UID), pod.Spec.Containers[0].Name)[resourceName])
}

// allocatableOf is the resource's allocatable count from either manager's GetCapacity.
func allocatableOf(getCapacity func() (v1.ResourceList, v1.ResourceList, []string)) int64 {
	_, alloc, _ := getCapacity()
	q := alloc[resourceName]
	return q.Value()
}

// sortedIDs returns the keys of either manager's per-device map, sorted.
func sortedIDs[V any](devices map[string]V) []string {
	ids := make([]string, 0, len(devices))
	for id := range devices {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

func (k *kdmManager) stop() {
	select {
	case <-k.done:
		return
	default:
	}
	_ = k.m.Stop()
	k.cancel()
	<-k.done
}

// drain reads a manager's health updates until ctx ends, then closes done.
func drain[T any](ctx context.Context, updates <-chan T, done chan<- struct{}) {
	defer close(done)
	for {
		select {
		case <-ctx.Done():
			return
		case <-updates:
		}
	}
}

// plugin is the kubelet's own device-plugin stub serving resourceName from dir, answering
// Allocate with allocate.
type plugin struct {
	s   *stub.Stub
	dir string
}

// startPlugin starts the stub with devs and registers it with the manager serving
// dir/kubelet.sock.
func startPlugin(tb testing.TB, dir string, devs []*pluginapi.Device) *plugin {
	tb.Helper()
	s := stub.NewDevicePluginStub(logr.Discard(), devs, filepath.Join(dir, "gpu.sock"), resourceName, false, false)
	s.SetAllocFunc(allocate)
	if err := s.Start(context.Background()); err != nil {
		tb.Fatalf("starting the plugin stub: %v", err)
	}
	tb.Cleanup(func() { _ = s.Stop(logr.Discard()) })
	p := &plugin{s: s, dir: dir}
	if err := p.register(); err != nil {
		tb.Fatal(err)
	}
	return p
}

// register registers the plugin with the manager serving kubelet.sock.
func (p *plugin) register() error {
	if err := p.s.Register(context.Background(), filepath.Join(p.dir, kdm.KubeletSocketName), resourceName, ""); err != nil {
		return fmt.Errorf("registering the plugin stub: %w", err)
	}
	return nil
}

// restart is what the plugin does when it sees a new kubelet.sock: serve its socket again
// (the manager removed it at start) and register.
func (p *plugin) restart() error {
	if err := p.s.Restart(context.Background()); err != nil {
		return fmt.Errorf("restarting the plugin stub: %w", err)
	}
	return p.register()
}

// waitAllocatable spins until m reports want allocatable devices. It yields between
// checks rather than sleeping, so that it adds no timer granularity to what is measured;
// both implementations are waited for the same way.
func waitAllocatable(tb testing.TB, m manager, want int64) {
	spinUntil(tb, func() bool { return m.allocatable() == want },
		func() string { return fmt.Sprintf("allocatable is %d after 30s, want %d", m.allocatable(), want) })
}

// spinUntil checks done in a loop, yielding between checks (see waitYield), until it holds;
// after 30 s it fails the test with failure's message.
func spinUntil(tb testing.TB, done func() bool, failure func() string) {
	var deadline time.Time
	yield := waitYield(tb)
	for i := 0; !done(); i++ {
		yield()
		if i%4096 == 0 {
			if deadline.IsZero() {
				deadline = time.Now().Add(30 * time.Second)
			} else if time.Now().After(deadline) {
				tb.Fatal(failure())
			}
		}
	}
}

// seedCheckpoint writes d as dir's kubelet_internal_checkpoint, for a manager to restore.
func seedCheckpoint(tb testing.TB, dir string, d *checkpoint.Data) {
	tb.Helper()
	s, err := checkpoint.NewStore(checkpoint.StoreConfig{Dir: dir})
	if err != nil {
		tb.Fatal(err)
	}
	if err := s.Write(d); err != nil {
		tb.Fatal(err)
	}
}

// waitYieldEnv names what the wait loop does between checks: "gosched" (the default,
// runtime.Gosched), "none" (nothing) or "sched_yield" (the system call, which yields the CPU
// to other threads but keeps the goroutine on its processor). docs/benchmarks.md compares
// them; the choice applies to both managers alike.
const waitYieldEnv = "UPSTREAMBENCH_WAIT_YIELD"

// waitYield returns the wait loop's step between checks, as waitYieldEnv selects it.
func waitYield(tb testing.TB) func() {
	switch v := os.Getenv(waitYieldEnv); v {
	case "", "gosched":
		return runtime.Gosched
	case "none":
		return func() {}
	case "sched_yield":
		return func() { _, _, _ = syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }
	default:
		tb.Fatalf("%s=%q: want gosched, none or sched_yield", waitYieldEnv, v)
		return nil
	}
}
