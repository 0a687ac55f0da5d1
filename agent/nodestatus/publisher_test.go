package nodestatus

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kdm-project/kdm/agent/internal/apitest"
)

// startPublisher runs a publisher on api and clk until the test ends, and waits until it
// sleeps on clk (its first sync, or registration attempt, is over).
func startPublisher(t *testing.T, cfg Config, clk *clocktesting.FakeClock) *Publisher {
	t.Helper()
	cfg.Clock = clk
	if cfg.Logger.GetSink() == nil {
		cfg.Logger = ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(2)))
	}
	p, err := NewPublisher(cfg)
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, p)
	apitest.Eventually(t, "the publisher to wait on its clock", clk.HasWaiters)
	return p
}

func getNode(t *testing.T, api *apitest.FakeAPI, name string) *v1.Node {
	t.Helper()
	n, err := api.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestNodePublisherIdentity: a new Node gets the identity, capacity less reserved, the device
// resources, addresses, nodeInfo and a Ready condition, all written by patch; the Lease is
// created. Register-only labels and taints are set at creation.
func TestNodePublisherIdentity(t *testing.T) {
	api := apitest.NewFakeAPI()
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	d := newDevices()
	d.set(apitest.Quantities("example.com/gpu", 4), apitest.Quantities("example.com/gpu", 3))
	info := v1.NodeSystemInfo{Architecture: "amd64", OperatingSystem: "linux", KernelVersion: "6.1.0", KubeletVersion: "v1.36.0-kdm"}
	addrs := []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.7"}, {Type: v1.NodeHostName, Address: "edge-1"}}
	taint := v1.Taint{Key: "example.com/edge", Value: "true", Effect: v1.TaintEffectNoSchedule}
	startPublisher(t, Config{
		Client: api, NodeName: "edge-1", Devices: d,
		Capacity: v1.ResourceList{v1.ResourceCPU: resource.MustParse("8"), v1.ResourceMemory: resource.MustParse("16Gi"),
			v1.ResourcePods: resource.MustParse("110")},
		Reserved:       v1.ResourceList{v1.ResourceCPU: resource.MustParse("1500m"), v1.ResourceMemory: resource.MustParse("1Gi")},
		Labels:         map[string]string{v1.LabelHostname: "edge-1", v1.LabelOSStable: "linux"},
		RegisterLabels: map[string]string{"example.com/rack": "r1"},
		RegisterTaints: []v1.Taint{taint},
		Addresses:      addrs, NodeInfo: info,
	}, clk)

	n := getNode(t, api, "edge-1")
	wantLabels := map[string]string{v1.LabelHostname: "edge-1", v1.LabelOSStable: "linux", "example.com/rack": "r1"}
	if diff := cmp.Diff(wantLabels, n.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	if len(n.Spec.Taints) != 1 || n.Spec.Taints[0].Key != taint.Key || n.Spec.Taints[0].Effect != taint.Effect {
		t.Errorf("taints %v, want %v", n.Spec.Taints, taint)
	}
	for _, c := range []struct {
		list       v1.ResourceList
		name, want string
	}{
		{n.Status.Capacity, "cpu", "8"}, {n.Status.Allocatable, "cpu", "6500m"},
		{n.Status.Capacity, "memory", "16Gi"}, {n.Status.Allocatable, "memory", "15Gi"},
		{n.Status.Capacity, "pods", "110"}, {n.Status.Allocatable, "pods", "110"},
		{n.Status.Capacity, "example.com/gpu", "4"}, {n.Status.Allocatable, "example.com/gpu", "3"},
	} {
		if q, ok := c.list[v1.ResourceName(c.name)]; !ok || q.Cmp(resource.MustParse(c.want)) != 0 {
			t.Errorf("%s = %v (present %v), want %s", c.name, q.String(), ok, c.want)
		}
	}
	if diff := cmp.Diff(addrs, n.Status.Addresses); diff != "" {
		t.Errorf("addresses (-want +got):\n%s", diff)
	}
	if n.Status.NodeInfo != info {
		t.Errorf("nodeInfo %+v, want %+v", n.Status.NodeInfo, info)
	}
	if !apitest.NodeReady(n) {
		t.Errorf("conditions %v: want Ready True", n.Status.Conditions)
	}
	if api.Count("patch nodes/status") == 0 || api.Count("update nodes/status") != 0 {
		t.Errorf("status writes: %d patches, %d updates; want patches only",
			api.Count("patch nodes/status"), api.Count("update nodes/status"))
	}
	if api.Count("create leases") != 1 {
		t.Errorf("lease creations: %d, want 1", api.Count("create leases"))
	}
}

// TestNodePublisherExistingNode: an existing Node gets the owned labels back, keeps others'
// labels and taints and gets no register-only ones, and keeps capacity keys it does not own.
func TestNodePublisherExistingNode(t *testing.T) {
	existing := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{v1.LabelHostname: "old", "team": "a"}},
		Spec:       v1.NodeSpec{Taints: []v1.Taint{{Key: "x", Effect: v1.TaintEffectNoExecute}}},
		Status:     v1.NodeStatus{Capacity: apitest.Quantities("vendor.io/fpga", 2), Allocatable: apitest.Quantities("vendor.io/fpga", 2)},
	}
	api := apitest.NewFakeAPI(existing)
	clk := clocktesting.NewFakeClock(time.Now())
	d := newDevices()
	d.set(apitest.Quantities("example.com/gpu", 1), apitest.Quantities("example.com/gpu", 1))
	startPublisher(t, Config{Client: api, NodeName: "n1", Devices: d,
		Labels:         map[string]string{v1.LabelHostname: "n1"},
		RegisterLabels: map[string]string{"new": "label"},
		RegisterTaints: []v1.Taint{{Key: "y", Effect: v1.TaintEffectNoSchedule}},
	}, clk)
	n := getNode(t, api, "n1")
	if diff := cmp.Diff(map[string]string{v1.LabelHostname: "n1", "team": "a"}, n.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	if len(n.Spec.Taints) != 1 || n.Spec.Taints[0].Key != "x" {
		t.Errorf("taints %v, want only x", n.Spec.Taints)
	}
	if !apitest.Has("vendor.io/fpga", 2, 2)(n) || !apitest.Has("example.com/gpu", 1, 1)(n) {
		t.Errorf("capacity %v allocatable %v", n.Status.Capacity, n.Status.Allocatable)
	}
}

// TestNodePublisherBackoff: registration retries wait longer after each failure, on the
// publisher's clock; the publisher reports unhealthy until a sync succeeds.
func TestNodePublisherBackoff(t *testing.T) {
	api := apitest.NewFakeAPI()
	api.Fail("get", "nodes", errors.New("connection refused"))
	clk := clocktesting.NewFakeClock(time.Now())
	p := startPublisher(t, Config{Client: api, NodeName: "n1", Devices: newDevices()}, clk)
	if api.Count("get nodes") != 1 {
		t.Fatalf("%d attempts before the first wait, want 1", api.Count("get nodes"))
	}
	if err := p.Healthy(); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("Healthy() = %v, want the API error", err)
	}
	// Delays start at 200ms and double, with up to 10% jitter added.
	for attempt, delay := range []time.Duration{200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond} {
		clk.Step(delay - time.Millisecond)
		if got := api.Count("get nodes"); got != attempt+1 {
			t.Fatalf("%d attempts %v before retry %d was due, want %d", got, delay-time.Millisecond, attempt+1, attempt+1)
		}
		clk.Step(delay/10 + 2*time.Millisecond) // past the longest jittered delay
		apitest.Eventually(t, "the next attempt", func() bool { return api.Count("get nodes") == attempt+2 })
		apitest.Eventually(t, "the publisher to wait again", clk.HasWaiters)
	}
	api.Fail("get", "nodes", nil)
	clk.Step(2 * time.Second)
	apitest.Eventually(t, "the node registered", func() bool { return api.Count("create nodes") == 1 })
	apitest.Eventually(t, "a healthy publisher", func() bool { return p.Healthy() == nil })
}

// TestNodePublisherNotReadyTaintHint: kdm explains, once, who removes the not-ready taint when
// the Node keeps it for a minute while Ready.
func TestNodePublisherNotReadyTaintHint(t *testing.T) {
	existing := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Spec: v1.NodeSpec{Taints: []v1.Taint{{Key: v1.TaintNodeNotReady, Effect: v1.TaintEffectNoSchedule}}}}
	api := apitest.NewFakeAPI(existing)
	clk := clocktesting.NewFakeClock(time.Now())
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	logs := func() string { return logger.GetSink().(ktesting.Underlier).GetBuffer().String() }
	const hint = "only the node lifecycle controller of kube-controller-manager removes it"
	startPublisher(t, Config{Client: api, NodeName: "n1", Devices: newDevices(), Logger: logger}, clk)
	syncs := func() int { return api.Count("get nodes") }
	tick := func() {
		before := syncs()
		clk.Step(maxPeriod)
		apitest.Eventually(t, "a status sync", func() bool { return syncs() > before && clk.HasWaiters() })
	}
	for range 5 { // 50 s
		tick()
	}
	if strings.Contains(logs(), hint) {
		t.Fatalf("hint logged before a minute passed:\n%s", logs())
	}
	for range 3 { // 80 s
		tick()
	}
	if n := strings.Count(logs(), hint); n != 1 {
		t.Fatalf("hint logged %d times after 80 s, want once:\n%s", n, logs())
	}
}

func TestNodePublisherConfigValidate(t *testing.T) {
	d := newDevices()
	api := apitest.NewFakeAPI()
	for _, tc := range []struct {
		name string
		cfg  Config
		want []string
	}{
		{"missing", Config{}, []string{
			"node publisher: a Kubernetes client is required",
			"node publisher: a node name is required",
			"node publisher: a device capacity source is required"}},
		{"bad values", Config{Client: api, NodeName: "n", Devices: d,
			Capacity:        v1.ResourceList{"memory": resource.MustParse("-1"), "example.com/gpu": resource.MustParse("1")},
			Labels:          map[string]string{"bad key!": "v"},
			RegisterTaints:  []v1.Taint{{Key: "k", Effect: "Sometimes"}},
			UpdateFrequency: -time.Second, LeaseDuration: time.Millisecond,
		}, []string{
			`node publisher capacity: "example.com/gpu" is a device resource, published by the device manager only`,
			"node publisher capacity: memory must not be negative: -1",
			`node publisher labels: key "bad key!": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')`,
			`node publisher register taints[0]: effect "Sometimes": want NoSchedule, PreferNoSchedule or NoExecute`,
			"node publisher: update frequency must not be negative: -1s",
			"node publisher: lease duration must be at least 1s: 1ms"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if err == nil {
				t.Fatal("Validate() = nil")
			}
			if diff := cmp.Diff(tc.want, strings.Split(err.Error(), "\n")); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
	if err := (Config{Client: api, NodeName: "n", Devices: d}).Validate(); err != nil {
		t.Errorf("minimal config: %v", err)
	}
}

// runUntilCleanup runs p until the test ends, and fails the test if Run returns an error.
func runUntilCleanup(t *testing.T, p *Publisher) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// TestNodePublisherSteadyRequests: at steady state a node costs the apiserver what a kubelet
// with its defaults costs: one Lease update per UpdateFrequency, no read of the Node or the
// Lease. After a failed call the next sync reads both again.
func TestNodePublisherSteadyRequests(t *testing.T) {
	api := apitest.NewFakeAPI()
	clk := clocktesting.NewFakeClock(time.Now())
	startPublisher(t, Config{Client: api, NodeName: "n1", Devices: newDevices()}, clk)
	counts := func() map[string]int {
		out := map[string]int{}
		for _, c := range []string{"get nodes", "get leases", "update leases", "patch nodes/status"} {
			out[c] = api.Count(c)
		}
		return out
	}
	tick := func() {
		before := api.Count("update leases")
		clk.Step(maxPeriod)
		apitest.Eventually(t, "a lease renewal", func() bool { return api.Count("update leases") > before && clk.HasWaiters() })
	}
	tick() // the first renewal after registration
	start := counts()
	for range 6 { // one minute
		tick()
	}
	got := counts()
	want := map[string]int{"get nodes": start["get nodes"], "get leases": start["get leases"],
		"update leases": start["update leases"] + 6, "patch nodes/status": start["patch nodes/status"]}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("requests over a steady minute (-want +got):\n%s", diff)
	}

	api.Fail("update", "leases", errors.New("apiserver restarting"))
	clk.Step(maxPeriod)
	apitest.Eventually(t, "the failed renewal", func() bool { return api.Count("update leases") > got["update leases"] })
	api.Fail("update", "leases", nil)
	apitest.Eventually(t, "the publisher to wait again", clk.HasWaiters)
	clk.Step(DefaultUpdateFrequency) // past the longest backoff
	apitest.Eventually(t, "the Node and the Lease read again", func() bool {
		return api.Count("get nodes") > got["get nodes"] && api.Count("get leases") > got["get leases"]
	})
}

// maxPeriod is past the longest jittered wait between steady syncs.
const maxPeriod = DefaultUpdateFrequency * 105 / 100

// TestNodePublisherPeriodJitter: steady syncs are UpdateFrequency apart plus up to 4%, as the
// kubelet's, so that nodes started together do not call the apiserver in the same second
// forever.
func TestNodePublisherPeriodJitter(t *testing.T) {
	api := apitest.NewFakeAPI()
	clk := clocktesting.NewFakeClock(time.Now())
	startPublisher(t, Config{Client: api, NodeName: "n1", Devices: newDevices()}, clk)
	for range 3 {
		before := api.Count("update leases")
		clk.Step(DefaultUpdateFrequency)
		// A sync due at exactly UpdateFrequency would have started by now; a jittered one waits.
		time.Sleep(50 * time.Millisecond)
		if got := api.Count("update leases"); got != before {
			t.Fatalf("a renewal exactly %v after the last sync: the period has no jitter", DefaultUpdateFrequency)
		}
		clk.Step(maxPeriod - DefaultUpdateFrequency)
		apitest.Eventually(t, "the jittered renewal", func() bool { return api.Count("update leases") > before && clk.HasWaiters() })
	}
}
