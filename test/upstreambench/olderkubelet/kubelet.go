//go:build olderkubelet

package olderkubelet

import (
	"path/filepath"
	"sort"
	"testing"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/kubelet/cm/containermap"
	kubeletdm "k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
	kubeletmetrics "k8s.io/kubernetes/pkg/kubelet/metrics"

	"github.com/kdm-project/kdm/test/upstreambench/suite"
)

// setup silences the kubelet's global klog output and registers the kubelet's metrics, which
// a running kubelet always has, as the parent module's TestMain does. It also turns on the
// feature gate ResourceHealthStatus, on by default from v1.36 and off in v1.35: without it the
// kubelet announces no health change, and the benchmarks that end when a pod's health update
// is announced (ListAndWatchUpdate, Restart) would never end. It lives outside the test files
// so that the per-release module's `go mod tidy` keeps what it needs.
func setup() {
	klog.SetLogger(logr.Discard())
	kubeletmetrics.Register()
	if err := utilfeature.DefaultMutableFeatureGate.Set("ResourceHealthStatus=true"); err != nil {
		panic(err)
	}
}

// kubeletSide is the device manager of the kubelet release the building module pins.
var kubeletSide = suite.Side{Name: sideName(), Kubelet: true, Launch: startKubelet}

// name is the policy name of the kubelet this binary is built with, as the table in
// devicemanager/kubelets.go names its rows ("kubelet-1.N"). A test binary carries no
// module list to read it from, so cmd/benchcompare sets it at link time from the row whose
// module builds the binary (-ldflags -X .../olderkubelet.name=kubelet-1.N; the module's
// pin is checked against the row by TestModulesFollowTable).
var name string

// sideName is name, or "kubelet-unknown" for a binary built without it.
func sideName() string {
	if name == "" {
		return "kubelet-unknown"
	}
	return name
}

// kubeletManager is the kubelet's ManagerImpl, built by NewKubeletManager.
type kubeletManager struct {
	m       *kubeletdm.ManagerImpl
	updates *suite.Updates
	dir     string // the plugin directory, for Settle
}

// noAffinity is a topology manager store without a NUMA preference. The kubelet's device
// manager only calls GetAffinity.
type noAffinity struct{}

func (noAffinity) GetAffinity(string, string) topologymanager.TopologyHint {
	return topologymanager.TopologyHint{}
}
func (noAffinity) GetPolicy() topologymanager.Policy { return nil }
func (noAffinity) Name() string                      { return "none" }

// startKubelet starts the kubelet's manager on dir as the kubelet's container manager does
// (Start with the pod source, no containers known to the runtime).
func startKubelet(tb testing.TB, dir string, pods *suite.PodList) suite.Manager {
	tb.Helper()
	m, err := NewKubeletManager(logr.Discard(), filepath.Join(dir, suite.KubeletSocketName), noAffinity{})
	if err != nil {
		tb.Fatalf("kubelet device manager: %v", err)
	}
	if err := m.Start(logr.Discard(), pods.Active, suite.AllSourcesReady{}, containermap.NewContainerMap(), sets.New[string]()); err != nil {
		tb.Fatalf("starting the kubelet device manager: %v", err)
	}
	// The kubelet's pod workers read health updates.
	return &kubeletManager{m: m, updates: suite.WatchUpdates(m.Updates()), dir: dir}
}

func (k *kubeletManager) Allocate(pod *v1.Pod) error {
	return k.m.Allocate(pod, &pod.Spec.Containers[0])
}

func (k *kubeletManager) Allocatable() int64 { return k.AllocatableOf(suite.ResourceName) }

func (k *kubeletManager) AllocatableOf(resource string) int64 {
	_, alloc, _ := k.m.GetCapacity()
	q := alloc[v1.ResourceName(resource)]
	return q.Value()
}

func (k *kubeletManager) Devices(pod *v1.Pod) []string {
	devs := k.m.GetDevices(string(pod.UID), pod.Spec.Containers[0].Name)[suite.ResourceName]
	ids := make([]string, 0, len(devs))
	for id := range devs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
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
