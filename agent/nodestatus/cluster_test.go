package nodestatus

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2/ktesting"

	"github.com/kdm-project/kdm/agent/internal/apitest"
	"github.com/kdm-project/kdm/e2e/kubecluster"
)

// testCluster is the package's real kube-apiserver and etcd, one node identity per test;
// TestMain stops it.
var testCluster = &kubecluster.Shared{
	ModuleDir: filepath.Join("..", "..", "test", "kubebins"),
	Nodes:     []string{"recreated", "removed-kubelet", "removed-kdm", "removed-elsewhere", "fresh"},
}

// devices is a DeviceCapacity whose answers the test sets.
type devices struct {
	mu          sync.Mutex
	capacity    v1.ResourceList
	allocatable v1.ResourceList
	removed     []string
	reset       bool
	changed     chan struct{}
}

func newDevices() *devices { return &devices{changed: make(chan struct{})} }

func (d *devices) GetCapacity() (v1.ResourceList, v1.ResourceList, []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	removed := d.removed
	d.removed = nil // reported once, as the device manager does
	return d.capacity.DeepCopy(), d.allocatable.DeepCopy(), removed
}

func (d *devices) ShouldResetExtendedResourceCapacity() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.reset
}

func (d *devices) DeviceChanges() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.changed
}

// set replaces the answers and signals a device change.
func (d *devices) set(capacity, allocatable v1.ResourceList, removed ...string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.capacity, d.allocatable, d.removed = capacity, allocatable, removed
	close(d.changed)
	d.changed = make(chan struct{})
}

// runPublisher runs a Publisher as the node's own identity until the test ends.
func runPublisher(t *testing.T, c *kubecluster.Cluster, node string, d DeviceCapacity, drop bool) {
	t.Helper()
	client, err := c.Client("system:node:" + node)
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPublisher(Config{Client: client, NodeName: node, Devices: d, DropRemovedResources: drop,
		UpdateFrequency: 200 * time.Millisecond, Logger: ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(2)))})
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, p)
}

// waitLeaseRenewals waits until the node's Lease has been renewed n times from now.
func waitLeaseRenewals(t *testing.T, admin kubernetes.Interface, node string, n int) {
	t.Helper()
	leases := admin.CoordinationV1().Leases(LeaseNamespace)
	lease, err := leases.Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := leases.Watch(context.Background(), metav1.ListOptions{
		FieldSelector: "metadata.name=" + node, ResourceVersion: lease.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	timeout := time.After(30 * time.Second)
	for seen := 0; seen < n; {
		select {
		case <-w.ResultChan():
			seen++
		case <-timeout:
			t.Fatalf("lease of %s renewed %d times in 30s, want %d", node, seen, n)
		}
	}
}

// TestNodePublisherCreatesNode: an absent Node is created by its own identity (Node authorizer
// and NodeRestriction), carries the device resources and a Ready condition, and gets a Lease
// owned by the Node; a device change is published without waiting for the next tick.
func TestNodePublisherCreatesNode(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real kube-apiserver and etcd; run by make test")
	}
	c := testCluster.Get(t)
	admin := apitest.AdminClient(t, c)
	apitest.ForgetNode(t, admin, "fresh")
	d := newDevices()
	d.set(apitest.Quantities("example.com/gpu", 4), apitest.Quantities("example.com/gpu", 4))
	runPublisher(t, c, "fresh", d, false)
	node := apitest.WaitNode(t, admin, "fresh", "4 GPUs", apitest.Has("example.com/gpu", 4, 4))
	ready := false
	for _, cond := range node.Status.Conditions {
		ready = ready || (cond.Type == v1.NodeReady && cond.Status == v1.ConditionTrue)
	}
	if !ready {
		t.Errorf("node conditions %v: want Ready True", node.Status.Conditions)
	}
	lease, err := admin.CoordinationV1().Leases(LeaseNamespace).Get(context.Background(), "fresh", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(lease.OwnerReferences) != 1 || lease.OwnerReferences[0].UID != node.UID {
		t.Errorf("lease owners %v: want the Node %s", lease.OwnerReferences, node.UID)
	}
	d.set(apitest.Quantities("example.com/gpu", 4), apitest.Quantities("example.com/gpu", 3))
	apitest.WaitNode(t, admin, "fresh", "one GPU unhealthy", apitest.Has("example.com/gpu", 4, 3))
}

// TestNodePublisherRecreatedNode: when the device manager says the node's state was wiped, the
// existing Node's extended resources are zeroed (cpu and others' resources kept) until the
// plugins report again.
func TestNodePublisherRecreatedNode(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real kube-apiserver and etcd; run by make test")
	}
	c := testCluster.Get(t)
	admin := apitest.AdminClient(t, c)
	ctx := context.Background()
	apitest.ForgetNode(t, admin, "recreated")
	node, err := admin.CoreV1().Nodes().Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "recreated"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Status.Capacity = apitest.Quantities("example.com/gpu", 4, "vendor.io/fpga", 2, "cpu", 8)
	node.Status.Allocatable = apitest.Quantities("example.com/gpu", 4, "vendor.io/fpga", 2, "cpu", 8)
	if _, err := admin.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	d := newDevices()
	d.reset = true
	d.capacity, d.allocatable = v1.ResourceList{}, v1.ResourceList{}
	runPublisher(t, c, "recreated", d, false)
	zeroed := apitest.WaitNode(t, admin, "recreated", "extended resources zeroed", func(n *v1.Node) bool {
		return apitest.Has("example.com/gpu", 0, 0)(n) && apitest.Has("vendor.io/fpga", 0, 0)(n)
	})
	if cpu, _ := apitest.Value(zeroed.Status.Capacity, "cpu"); cpu != 8 {
		t.Errorf("cpu capacity %d after the reset, want 8 kept", cpu)
	}
	d.set(apitest.Quantities("example.com/gpu", 2), apitest.Quantities("example.com/gpu", 2))
	apitest.WaitNode(t, admin, "recreated", "the plugin's GPUs", apitest.Has("example.com/gpu", 2, 2))
}

// TestNodePublisherRemovedResource: a resource the device manager removes (its plugin gone past
// the grace period) is published as 0 under the kubelet's behaviour and dropped from the Node
// under DropRemovedResources.
func TestNodePublisherRemovedResource(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real kube-apiserver and etcd; run by make test")
	}
	c := testCluster.Get(t)
	admin := apitest.AdminClient(t, c)
	for _, tc := range []struct {
		node string
		drop bool
		// lost: another caller of GetCapacity (an HTTP /status read) took the removal
		lost bool
	}{{"removed-kubelet", false, false}, {"removed-kdm", true, false}, {"removed-elsewhere", false, true}} {
		t.Run(tc.node, func(t *testing.T) {
			apitest.ForgetNode(t, admin, tc.node)
			d := newDevices()
			d.set(apitest.Quantities("example.com/gpu", 2), apitest.Quantities("example.com/gpu", 2))
			runPublisher(t, c, tc.node, d, tc.drop)
			apitest.WaitNode(t, admin, tc.node, "2 GPUs", apitest.Has("example.com/gpu", 2, 2))
			if tc.lost {
				d.set(v1.ResourceList{}, v1.ResourceList{})
			} else {
				d.set(v1.ResourceList{}, v1.ResourceList{}, "example.com/gpu")
			}
			want := fmt.Sprintf("example.com/gpu published as 0 (drop=%v)", tc.drop)
			n := apitest.WaitNode(t, admin, tc.node, want, func(n *v1.Node) bool {
				if tc.drop {
					_, inC := n.Status.Capacity["example.com/gpu"]
					_, inA := n.Status.Allocatable["example.com/gpu"]
					return !inC && !inA
				}
				return apitest.Has("example.com/gpu", 0, 0)(n)
			})
			// Later syncs no longer name the resource; the Node must stay as published. Each
			// lease renewal follows a status sync, so two renewals mean at least one more sync.
			waitLeaseRenewals(t, admin, tc.node, 2)
			again := apitest.WaitNode(t, admin, tc.node, "no change", func(*v1.Node) bool { return true })
			if !resourcesEqual(n.Status.Capacity, again.Status.Capacity) {
				t.Errorf("capacity moved from %v to %v", n.Status.Capacity, again.Status.Capacity)
			}
		})
	}
}
