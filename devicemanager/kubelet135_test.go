package devicemanager

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// TestHintsOverEveryNUMANode: with a resource's only device on node 0 of a three-node
// machine, the kubelet v1.35 enumerates masks over every node, so the request of one device
// gets {0} (preferred) and each larger mask holding node 0; from v1.36 (and under kdm) only
// the device-bearing node is enumerated.
func TestHintsOverEveryNUMANode(t *testing.T) {
	for _, tc := range []struct {
		policy string
		want   []TopologyHint
	}{
		{"kubelet-1.35", []TopologyHint{hint(true, 0), hint(false, 0, 1), hint(false, 0, 2), hint(false, 0, 1, 2)}},
		{"kubelet-1.36", []TopologyHint{hint(true, 0)}},
		{"kdm", []TopologyHint{hint(true, 0)}},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			p, err := ParsePolicy(tc.policy)
			if err != nil {
				t.Fatal(err)
			}
			m, err := New(Config{PluginDir: "/x", NUMANodes: []int{0, 1, 2}, Policy: p})
			if err != nil {
				t.Fatal(err)
			}
			seed(m, "r", numaDevice("a", 0))
			c := container("c", map[string]int64{"r": 1})
			got := m.GetTopologyHints(testPod("p", c), &c)["r"]
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("hints (-want +got):\n%s", diff)
			}
		})
	}
}

// TestNoDeviceHealthInPodStatus: under the kubelet v1.35 (ResourceHealthStatus off by
// default) a held device's health is never put into pod status and its plugin's
// disconnect names no pod; under kubelet-1.36 both happen (the control).
func TestNoDeviceHealthInPodStatus(t *testing.T) {
	for _, tc := range []struct {
		policy string
		report bool
	}{{"kubelet-1.35", false}, {"kubelet-1.36", true}} {
		t.Run(tc.policy, func(t *testing.T) {
			p, err := ParsePolicy(tc.policy)
			if err != nil {
				t.Fatal(err)
			}
			dir := shortDir(t)
			pods := newPodList()
			m := testManager(t, dir, Config{Policy: p}, Sources{ActivePods: pods.active})
			devs := devices(pluginapi.Healthy, "g1", "g2")
			plugin := testPlugin(t, dir, gpu, "gpu.sock", &pluginapi.DevicePluginOptions{}, devs, envAllocator("GPU"))
			waitFor(t, m, "devices", func() bool { return capacityIs(m, gpu, 2, 2) })
			allocateOne(t, m, pods, "a", 1)
			drain(m.Updates())
			if got := podHealth(m, "a"); (len(got) > 0) != tc.report {
				t.Fatalf("pod status health %v; reported = %v, want %v", got, len(got) > 0, tc.report)
			}
			plugin.Stop()
			waitFor(t, m, "the plugin gone", func() bool { return capacityIs(m, gpu, 2, 0) })
			if tc.report {
				expectUpdate(t, m, "after the plugin went away", []string{"a"})
				return
			}
			// An update sent by the disconnect would follow the capacity change at once;
			// its absence here is checked without waiting (no timing is asserted).
			select {
			case u := <-m.Updates():
				t.Fatalf("update %v under %s, which reports no device health", u, tc.policy)
			default:
			}
			if got := podHealth(m, "a"); len(got) != 0 {
				t.Fatalf("pod status health %v under %s", got, tc.policy)
			}
		})
	}
}
