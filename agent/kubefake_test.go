package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kdm-project/kdm/agent/internal/apitest"
	"github.com/kdm-project/kdm/agent/podresult"
)

// podEvent returns the first event of the pod with this reason, or nil.
func podEvent(t *testing.T, api *apitest.FakeAPI, ns, pod, reason string) *v1.Event {
	t.Helper()
	list, err := api.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		e := &list.Items[i]
		if e.InvolvedObject.Name == pod && e.Reason == reason {
			return e
		}
	}
	return nil
}

func getPod(t *testing.T, api *apitest.FakeAPI, ns, name string) *v1.Pod {
	t.Helper()
	p, err := api.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// fakePod is gpuPod with a UID, which the fake API server does not assign.
func fakePod(ns, name, node string, initGPUs, appGPUs int) *v1.Pod {
	p := gpuPod(ns, name, node, initGPUs, appGPUs)
	p.UID = types.UID("uid-" + name)
	return p
}

// TestAgentNodeAndPodsOnFakeAPI: with a Kubernetes client the agent publishes a Node that
// looks like a kubelet's (capacity less reserved, labels, taints, address, nodeInfo, Ready,
// GPUs), reports admitted pods Running with ready containers and a Normal event naming their
// devices, rejected pods Failed with a Warning event, all written by patch; its readiness
// follows the API server.
func TestAgentNodeAndPodsOnFakeAPI(t *testing.T) {
	api := apitest.NewFakeAPI()
	clk := clocktesting.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	f := newFixture(t)
	taint := v1.Taint{Key: "example.com/edge", Effect: v1.TaintEffectNoSchedule}
	a, _ := f.runWith(Config{
		KubeClient: api, NodeName: "edge-1", NodeIP: "10.0.0.9", Clock: clk,
		CapacityOverride: v1.ResourceList{v1.ResourceCPU: resource.MustParse("4"), v1.ResourceMemory: resource.MustParse("8Gi"),
			v1.ResourceEphemeralStorage: resource.MustParse("100Gi")},
		NodeCapacity:       v1.ResourceList{v1.ResourcePods: resource.MustParse("110")},
		SystemReserved:     v1.ResourceList{v1.ResourceCPU: resource.MustParse("500m")},
		KubeReserved:       v1.ResourceList{v1.ResourceCPU: resource.MustParse("500m"), v1.ResourceMemory: resource.MustParse("1Gi")},
		NodeLabels:         map[string]string{"example.com/rack": "r1"},
		RegisterWithTaints: []v1.Taint{taint},
	})
	f.plugin("g0", "g1")
	var node *v1.Node
	apitest.Eventually(t, "the node's GPUs", func() bool {
		n, err := api.CoreV1().Nodes().Get(context.Background(), "edge-1", metav1.GetOptions{})
		node = n
		return err == nil && apitest.Has("example.com/gpu", 2, 2)(n)
	})
	for name, want := range map[string]string{"cpu": "3", "memory": "7Gi", "ephemeral-storage": "100Gi", "pods": "110"} {
		if q := node.Status.Allocatable[v1.ResourceName(name)]; q.Cmp(resource.MustParse(want)) != 0 {
			t.Errorf("allocatable %s = %s, want %s", name, q.String(), want)
		}
	}
	if q := node.Status.Capacity[v1.ResourceCPU]; q.Cmp(resource.MustParse("4")) != 0 {
		t.Errorf("cpu capacity %s, want 4", q.String())
	}
	for k, v := range map[string]string{v1.LabelArchStable: node.Status.NodeInfo.Architecture, v1.LabelOSStable: "linux",
		v1.LabelHostname: a.host.hostnameLabel("edge-1"), "example.com/rack": "r1"} {
		if node.Labels[k] != v || v == "" {
			t.Errorf("label %s = %q, want %q", k, node.Labels[k], v)
		}
	}
	if len(node.Spec.Taints) != 1 || node.Spec.Taints[0].Key != taint.Key {
		t.Errorf("taints %v, want %v", node.Spec.Taints, taint)
	}
	if len(node.Status.Addresses) == 0 || node.Status.Addresses[0] != (v1.NodeAddress{Type: v1.NodeInternalIP, Address: "10.0.0.9"}) {
		t.Errorf("addresses %v, want InternalIP 10.0.0.9 first", node.Status.Addresses)
	}
	if info := node.Status.NodeInfo; info.KubeletVersion != ReportedVersion() || info.KernelVersion == "" || info.OperatingSystem != "linux" {
		t.Errorf("nodeInfo %+v", info)
	}
	if !apitest.NodeReady(node) {
		t.Errorf("conditions %v: want Ready", node.Status.Conditions)
	}

	const ns = "default"
	ctx := context.Background()
	if _, err := api.CoreV1().Pods(ns).Create(ctx, fakePod(ns, "ok", "edge-1", 1, 2), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	apitest.Eventually(t, "pod ok Running", func() bool { return getPod(t, api, ns, "ok").Status.Phase == v1.PodRunning })
	p := getPod(t, api, ns, "ok")
	if len(p.Status.ContainerStatuses) != 1 {
		t.Fatalf("container statuses %+v", p.Status.ContainerStatuses)
	}
	cs := p.Status.ContainerStatuses[0]
	if !cs.Ready || cs.Started == nil || !*cs.Started || cs.State.Running == nil || !cs.State.Running.StartedAt.Time.Equal(clk.Now()) {
		t.Errorf("container status %+v: want ready, started, running since %v", cs, clk.Now())
	}
	if len(p.Status.InitContainerStatuses) != 1 || p.Status.InitContainerStatuses[0].State.Terminated == nil ||
		p.Status.InitContainerStatuses[0].State.Terminated.Reason != "Completed" {
		t.Errorf("init container statuses %+v: want terminated, Completed", p.Status.InitContainerStatuses)
	}
	for _, c := range p.Status.Conditions {
		if c.Status != v1.ConditionTrue {
			t.Errorf("condition %s is %s, want True", c.Type, c.Status)
		}
	}
	apitest.Eventually(t, "the DevicesAssigned event", func() bool { return podEvent(t, api, ns, "ok", ReasonDevicesAssigned) != nil })
	ev := podEvent(t, api, ns, "ok", ReasonDevicesAssigned)
	if ev.Type != v1.EventTypeNormal || !strings.Contains(ev.Message, "container main: example.com/gpu g0, g1") ||
		ev.Source.Component != "kdm" || ev.Source.Host != "edge-1" {
		t.Errorf("event %s %q from %+v", ev.Type, ev.Message, ev.Source)
	}

	if _, err := api.CoreV1().Pods(ns).Create(ctx, fakePod(ns, "big", "edge-1", 0, 3), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	apitest.Eventually(t, "pod big Failed", func() bool { return getPod(t, api, ns, "big").Status.Phase == v1.PodFailed })
	if big := getPod(t, api, ns, "big"); big.Status.Reason != ReasonUnexpectedAdmissionError {
		t.Errorf("rejected pod reason %q", big.Status.Reason)
	}
	apitest.Eventually(t, "the rejection's Warning event", func() bool {
		e := podEvent(t, api, ns, "big", ReasonUnexpectedAdmissionError)
		return e != nil && e.Type == v1.EventTypeWarning
	})
	if api.Count("patch pods/status") < 2 || api.Count("update pods/status") != 0 || api.Count("update nodes/status") != 0 {
		t.Errorf("status writes: pods %d patches %d updates, nodes %d updates; want patches only",
			api.Count("patch pods/status"), api.Count("update pods/status"), api.Count("update nodes/status"))
	}

	check := func(name string) func() error {
		for _, c := range a.Checks() {
			if c.Name == name {
				return c.Check
			}
		}
		t.Fatalf("no %s check", name)
		return nil
	}
	for _, name := range []string{CheckPing, CheckDevicePlugin, CheckPodResources, CheckPodSources, CheckAPIServer} {
		if err := check(name)(); err != nil {
			t.Errorf("check %s: %v", name, err)
		}
	}
	// A steady node renews its Lease from the one it last wrote, reading nothing; the renewal
	// is the call that fails. The sync waits its period plus up to 4% jitter.
	api.Fail("get", "nodes", errors.New("connection refused"))
	api.Fail("update", "leases", errors.New("connection refused"))
	clk.Step(DefaultNodeStatusUpdateFrequency + DefaultNodeStatusUpdateFrequency/20)
	apitest.Eventually(t, "readiness to fail with the API server", func() bool { return check(CheckAPIServer)() != nil })
}

// TestResultsMoveToTheirOwnDirectory: results an earlier version wrote to <root>/pods move
// to <root>/kdm/pods at start; the kubelet's pod directories and files that are not kdm's
// results stay.
func TestResultsMoveToTheirOwnDirectory(t *testing.T) {
	f := newFixture(t)
	legacy := filepath.Join(f.root, "pods")
	if err := os.MkdirAll(filepath.Join(legacy, "6f2c0d1e-kubelet-pod"), 0o750); err != nil {
		t.Fatal(err)
	}
	const result = `{"namespace":"default","name":"old","uid":"uid-old","phase":"Rejected"}`
	for name, body := range map[string]string{"default_old_uid-old.json": result, "other.json": "{not kdm's"} {
		if err := os.WriteFile(filepath.Join(legacy, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	a, err := New(Config{RootDir: f.root, DevicePluginDir: f.plugins, PodManifestPath: f.pods,
		Logger: ktesting.NewLogger(t, ktesting.NewConfig())})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(a.cfg.PodsDir(), 0o750); err != nil {
		t.Fatal(err)
	}
	podresult.Migrate(a.log, a.cfg.legacyPodsDir(), a.cfg.PodsDir())
	moved, err := os.ReadFile(filepath.Join(f.root, "kdm", "pods", "default_old_uid-old.json"))
	if err != nil || string(moved) != result {
		t.Fatalf("moved result %q, %v", moved, err)
	}
	for _, stays := range []string{"6f2c0d1e-kubelet-pod", "other.json"} {
		if _, err := os.Stat(filepath.Join(legacy, stays)); err != nil {
			t.Errorf("%s: %v", stays, err)
		}
	}
	if _, err := os.Stat(filepath.Join(legacy, "default_old_uid-old.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("old copy of the result: %v, want it gone", err)
	}
}
