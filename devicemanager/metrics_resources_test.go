package devicemanager

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// TestResourceMetrics: the per-resource gauges follow the plugin through a health change and
// its exit, agreeing with GetCapacity at each step, and a second manager on the same registry
// takes the series over.
func TestResourceMetrics(t *testing.T) {
	dir := shortDir(t)
	reg := prometheus.NewRegistry()
	m := testManager(t, dir, Config{Registerer: reg}, Sources{})
	p := testPlugin(t, dir, gpu, "p.sock", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "g1", "g2", "g3"))
	waitFor(t, m, "plugin", func() bool { return capacityIs(m, gpu, 3, 3) })
	expect := func(step, want string) {
		t.Helper()
		names := []string{"kdm_resource_capacity", "kdm_resource_allocatable", "kdm_resource_devices", "kdm_plugin_up"}
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}
	const help = `# HELP kdm_plugin_up 1 while a connected device plugin instance serves the resource, 0 while none does.
# TYPE kdm_plugin_up gauge
# HELP kdm_resource_allocatable Devices of the resource counted in the node's allocatable (healthy ones), as GetCapacity reports them.
# TYPE kdm_resource_allocatable gauge
# HELP kdm_resource_capacity Devices of the resource counted in the node's capacity, as GetCapacity reports them.
# TYPE kdm_resource_capacity gauge
# HELP kdm_resource_devices Devices of the resource in its plugin's last list, by health.
# TYPE kdm_resource_devices gauge
`
	expect("registered", help+`kdm_plugin_up{resource="example.com/gpu"} 1
kdm_resource_allocatable{resource="example.com/gpu"} 3
kdm_resource_capacity{resource="example.com/gpu"} 3
kdm_resource_devices{health="healthy",resource="example.com/gpu"} 3
kdm_resource_devices{health="unhealthy",resource="example.com/gpu"} 0
`)
	if err := p.SetHealth("g2", pluginapi.Unhealthy); err != nil {
		t.Fatal(err)
	}
	waitFor(t, m, "health change", func() bool { return capacityIs(m, gpu, 3, 2) })
	expect("one unhealthy", help+`kdm_plugin_up{resource="example.com/gpu"} 1
kdm_resource_allocatable{resource="example.com/gpu"} 2
kdm_resource_capacity{resource="example.com/gpu"} 3
kdm_resource_devices{health="healthy",resource="example.com/gpu"} 2
kdm_resource_devices{health="unhealthy",resource="example.com/gpu"} 1
`)
	p.Stop()
	waitFor(t, m, "plugin gone", func() bool { return capacityIs(m, gpu, 3, 0) })
	expect("plugin gone", help+`kdm_plugin_up{resource="example.com/gpu"} 0
kdm_resource_allocatable{resource="example.com/gpu"} 0
kdm_resource_capacity{resource="example.com/gpu"} 3
kdm_resource_devices{health="healthy",resource="example.com/gpu"} 0
kdm_resource_devices{health="unhealthy",resource="example.com/gpu"} 3
`)
	if err := m.Stop(); err != nil {
		t.Fatal(err)
	}
	// A restart in the same process: the new manager's (empty) state is what is reported.
	testManager(t, shortDir(t), Config{Registerer: reg}, Sources{})
	expect("second manager", "")
}
