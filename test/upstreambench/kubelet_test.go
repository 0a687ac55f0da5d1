package upstreambench

import (
	"context"
	"path/filepath"
	"sort"
	"testing"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/kubelet/cm/containermap"
	kubeletdm "k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"

	"github.com/kdm-project/kdm/devicemanager"
	"github.com/kdm-project/kdm/test/upstreambench/suite"
)

// kubeletSide is the newest kubelet's device manager, the release go.mod pins
// (TestModulesFollowTable in cmd/benchcompare checks the pin against the table). Older
// releases run in package olderkubelet, in a nested module each.
var kubeletSide = suite.Side{Name: devicemanager.NewestKubelet().Name, Kubelet: true, Launch: startKubelet}

// kubeletManager is the kubelet's ManagerImpl, built by NewKubeletManager.
type kubeletManager struct {
	m       *kubeletdm.ManagerImpl
	updates *suite.Updates
	dir     string // the plugin directory, for Settle
}

// noAffinity is a topology manager store without a NUMA preference (kdm's nil
// TopologyAffinity). The kubelet's device manager only calls GetAffinity.
type noAffinity struct{}

func (noAffinity) GetAffinity(klog.Logger, string, string) topologymanager.TopologyHint {
	return topologymanager.TopologyHint{}
}
func (noAffinity) GetPolicy() topologymanager.Policy { return nil }
func (noAffinity) Name() string                      { return "none" }

// startKubelet starts the kubelet's manager on dir as the kubelet's container manager does
// (Start with the pod source, no containers known to the runtime).
func startKubelet(tb testing.TB, dir string, pods *suite.PodList) suite.Manager {
	tb.Helper()
	m, err := NewKubeletManager(logr.Discard(), filepath.Join(dir, suite.KubeletSocketName), nil, noAffinity{})
	if err != nil {
		tb.Fatalf("kubelet device manager: %v", err)
	}
	if err := m.Start(logr.Discard(), pods.Active, suite.AllSourcesReady{}, containermap.NewContainerMap(), sets.New[string]()); err != nil {
		tb.Fatalf("starting the kubelet device manager: %v", err)
	}
	// The kubelet's pod workers read health updates.
	return &kubeletManager{m: m, updates: suite.WatchUpdates(m.Updates()), dir: dir}
}

// Allocate admits the container as the kubelet admits a new pod (not a resize).
func (k *kubeletManager) Allocate(pod *v1.Pod) error {
	return k.m.Allocate(context.Background(), pod, &pod.Spec.Containers[0], lifecycle.AddOperation)
}

func (k *kubeletManager) Allocatable() int64 { return k.AllocatableOf(suite.ResourceName) }

func (k *kubeletManager) AllocatableOf(resource string) int64 {
	_, alloc, _ := k.m.GetCapacity(logr.Discard())
	q := alloc[v1.ResourceName(resource)]
	return q.Value()
}

func (k *kubeletManager) Devices(pod *v1.Pod) []string {
	return sortedIDs(k.m.GetDevices(string(pod.UID), pod.Spec.Containers[0].Name)[suite.ResourceName])
}

func (k *kubeletManager) Updated() <-chan struct{} { return k.updates.Signal() }

// Settle waits for the checkpoint to be replaced since before: the kubelet writes it after
// every device list, on the plugin's stream once the list shows in GetCapacity; its Stop does
// not wait for that write.
func (k *kubeletManager) Settle(tb testing.TB, before suite.FileID) {
	suite.WaitReplaced(tb, k.dir, before)
}

func (k *kubeletManager) Stop() {
	if k.updates.Stopped() {
		return
	}
	_ = k.m.Stop(logr.Discard())
	k.updates.Stop()
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
