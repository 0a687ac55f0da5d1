package devicemanager

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// reentrantAffinity answers GetAffinity after calling back into the manager.
type reentrantAffinity struct{ m **Manager }

func (a reentrantAffinity) GetAffinity(podUID, container string) TopologyHint {
	(*a.m).GetCapacity()
	_ = (*a.m).GetDevices(podUID, container)
	return TopologyHint{NUMANodes: []int{0}, Preferred: true}
}

// TestCallbacksMayCallBack: the embedder's SourcesReady, ActivePods and AffinityStore run
// without the manager's lock, so callbacks that call back into the manager do not deadlock
// an admission.
func TestCallbacksMayCallBack(t *testing.T) {
	dir := shortDir(t)
	var m *Manager
	pods := newPodList()
	src := Sources{
		ActivePods: func() []*v1.Pod {
			_ = m.GetAllocatableDevices()
			return pods.active()
		},
		SourcesReady: func() bool {
			m.GetCapacity()
			return true
		},
	}
	m = testManager(t, dir, Config{TopologyAffinity: reentrantAffinity{&m}, NUMANodes: []int{0, 1}}, src)
	testPlugin(t, dir, gpu, "gpu.sock", &pluginapi.DevicePluginOptions{},
		[]*pluginapi.Device{numaDevice("g0", 0), numaDevice("g1", 1)})
	waitFor(t, m, "devices", func() bool { return capacityIs(m, gpu, 2, 2) })
	p := testPod("p", container("c", map[string]int64{gpu: 1}))
	pods.add(p)
	done := make(chan error, 1)
	go func() { done <- m.Allocate(context.Background(), p, &p.Spec.Containers[0]) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Allocate deadlocked: an embedder callback ran under the manager's lock")
	}
	if _, ok := m.GetDevices("p", "c")[gpu]["g0"]; !ok {
		t.Fatalf("the hint for NUMA node 0 was not followed: %v", m.GetDevices("p", "c"))
	}
}
