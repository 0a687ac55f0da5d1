package devicemanager

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/deviceplugin"
	"github.com/kdm-project/kdm/deviceplugin/plugintest"

	"github.com/kdm-project/kdm/internal/sockdir"
)

// waitTimeout bounds every wait for an event in these tests.
const waitTimeout = 20 * time.Second

// shortDir returns a temp dir short enough for unix socket paths, removed at cleanup.
var shortDir = sockdir.New

// testManager builds and starts a manager on dir with cfg's other fields, stopping it at
// cleanup.
func testManager(t testing.TB, dir string, cfg Config, src Sources) *Manager {
	t.Helper()
	cfg.PluginDir = dir
	if cfg.Logger.GetSink() == nil {
		cfg.Logger = ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(2)))
	}
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := m.Start(context.Background(), src); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = m.Stop() })
	return m
}

// testPlugin starts a plugin for resource in dir, registered with the manager's kubelet.sock,
// and stops it at cleanup.
func testPlugin(t testing.TB, dir, resource, socket string, opts *pluginapi.DevicePluginOptions, devs []*pluginapi.Device, mutate ...func(*deviceplugin.Config)) *plugintest.Plugin {
	t.Helper()
	cfg := deviceplugin.Config{
		ResourceName: resource,
		PluginDir:    dir,
		SocketName:   socket,
		Options:      opts,
		Devices:      devs,
		Logger:       ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(1))),
	}
	for _, f := range mutate {
		f(&cfg)
	}
	// The tests read the requests the plugin received (Calls, WaitForCalls).
	p, err := plugintest.New(cfg, plugintest.RecordRequests())
	if err != nil {
		t.Fatalf("plugintest.New: %v", err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatalf("plugin Start: %v", err)
	}
	t.Cleanup(p.Stop)
	return p
}

// waitFor blocks until cond holds, re-checking whenever the manager's devices or endpoints
// change, and fails the test after waitTimeout.
func waitFor(t testing.TB, m *Manager, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	for {
		m.mu.Lock()
		changed := m.deviceChange
		m.mu.Unlock()
		if cond() {
			return
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// capacityIs reports whether GetCapacity gives exactly the counts for the resource
// (-1: absent).
func capacityIs(m *Manager, res string, capacity, allocatable int64) bool {
	c, a, _ := m.GetCapacity()
	return quantity(c, res) == capacity && quantity(a, res) == allocatable
}

func quantity(l v1.ResourceList, res string) int64 {
	q, ok := l[v1.ResourceName(res)]
	if !ok {
		return -1
	}
	return q.Value()
}

func devices(health string, ids ...string) []*pluginapi.Device {
	out := make([]*pluginapi.Device, 0, len(ids))
	for _, id := range ids {
		out = append(out, &pluginapi.Device{ID: id, Health: health})
	}
	return out
}

func numaDevice(id string, nodes ...int64) *pluginapi.Device {
	d := &pluginapi.Device{ID: id, Health: pluginapi.Healthy}
	if len(nodes) > 0 {
		d.Topology = &pluginapi.TopologyInfo{}
		for _, n := range nodes {
			d.Topology.Nodes = append(d.Topology.Nodes, &pluginapi.NUMANode{ID: n})
		}
	}
	return d
}

// testPod builds a pod with the given containers, each asking for its limits.
func testPod(uid string, containers ...v1.Container) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Name: "pod-" + uid, Namespace: "default"},
		Spec:       v1.PodSpec{Containers: containers},
	}
}

func container(name string, limits map[string]int64) v1.Container {
	c := v1.Container{Name: name, Resources: v1.ResourceRequirements{Limits: v1.ResourceList{}}}
	for res, n := range limits {
		c.Resources.Limits[v1.ResourceName(res)] = *resource.NewQuantity(n, resource.DecimalSI)
	}
	return c
}

func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

// listenUnix listens on a unix socket at path until the test ends.
func listenUnix(t testing.TB, path string) net.Listener {
	t.Helper()
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lis.Close() })
	return lis
}

func resourceQuantity(n int64) *resource.Quantity { return resource.NewQuantity(n, resource.DecimalSI) }
