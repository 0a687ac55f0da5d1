package devicemanager

import (
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/internal/checkpoint"
	"github.com/kdm-project/kdm/internal/state"
)

// BenchmarkCollectInactivePods measures the garbage collection of an Allocate on a node
// with n pods, each holding one device: per op one pod arrives and is allocated a device,
// the oldest one leaves, and the pods are collected. "followed" is the manager's collection;
// "fullset" the one that puts every active UID in a set and looks up every pod of the state
// in it, for comparison.
func BenchmarkCollectInactivePods(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		for _, mode := range []string{"followed", "fullset"} {
			b.Run(fmt.Sprintf("pods=%d/%s", n, mode), func(b *testing.B) {
				benchmarkCollect(b, n, mode == "fullset")
			})
		}
	}
}

func benchmarkCollect(b *testing.B, n int, fullSet bool) {
	m, err := New(Config{PluginDir: shortDir(b)})
	if err != nil {
		b.Fatal(err)
	}
	var list []*v1.Pod
	m.sources = Sources{ActivePods: func() []*v1.Pod { return append([]*v1.Pod(nil), list...) }}
	dev := func(i int) string { return fmt.Sprintf("dev-%d", i%(n+1)) }
	m.st.AddRestored(gcResource, m.cfg.Clock.Now())
	devs := make([]*pluginapi.Device, n+1)
	for i := range devs {
		devs[i] = &pluginapi.Device{ID: dev(i), Health: pluginapi.Healthy}
	}
	m.st.ApplyDeviceList(gcResource, devs)
	admit := func(i int) {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%d", i), Namespace: "default",
			UID: types.UID(fmt.Sprintf("%08d-0000-4000-8000-000000000000", i))}}
		list = append(list, p)
		m.mu.Lock()
		m.st.Commit(string(p.UID), "c", gcResource, nil, checkpoint.DevicesPerNUMA{state.NoTopology: {dev(i)}},
			&pluginapi.ContainerAllocateResponse{})
		m.mu.Unlock()
	}
	for i := range n {
		admit(i)
	}
	m.collectInactivePods()
	next := n
	for b.Loop() {
		admit(next)
		list = list[1:]
		next++
		if !fullSet {
			m.collectInactivePods()
			continue
		}
		pods := m.sources.ActivePods()
		active := make(sets.Set[string], len(pods))
		for _, p := range pods {
			active.Insert(string(p.UID))
		}
		m.mu.Lock()
		m.st.RemoveInactive(active)
		m.mu.Unlock()
	}
	if got := len(m.st.PodUIDs()); got != n {
		b.Fatalf("%d pods hold devices, want %d", got, n)
	}
}
