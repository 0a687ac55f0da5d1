package apitest

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/kdm-project/kdm/e2e/kubecluster"
)

// Quantities builds a resource list from name, count pairs: Quantities("example.com/gpu", 2).
func Quantities(kv ...any) v1.ResourceList {
	out := v1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		out[v1.ResourceName(kv[i].(string))] = *resource.NewQuantity(int64(kv[i+1].(int)), resource.DecimalSI)
	}
	return out
}

// AdminClient returns a client of c with the cluster administrator's identity.
func AdminClient(t testing.TB, c *kubecluster.Cluster) kubernetes.Interface {
	t.Helper()
	admin, err := c.Client(kubecluster.AdminUser)
	if err != nil {
		t.Fatal(err)
	}
	return admin
}

// ForgetNode removes the node's Node, Lease and pods when the test ends, so that a rerun
// (go test -count) finds the cluster as the first run did.
func ForgetNode(t testing.TB, admin kubernetes.Interface, name string) {
	t.Cleanup(func() {
		ctx := context.Background()
		pods, _ := admin.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + name})
		if pods != nil {
			for _, p := range pods.Items {
				_ = admin.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
			}
		}
		_ = admin.CoordinationV1().Leases(v1.NamespaceNodeLease).Delete(ctx, name, metav1.DeleteOptions{})
		_ = admin.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
	})
}

// WaitNode polls the Node until cond holds and returns it; after 30 s the test fails, naming
// what and the Node's last capacity.
func WaitNode(t testing.TB, admin kubernetes.Interface, name, what string, cond func(*v1.Node) bool) *v1.Node {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last *v1.Node
	for time.Now().Before(deadline) {
		n, err := admin.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		if err == nil {
			last = n
			if cond(n) {
				return n
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	if last != nil {
		t.Fatalf("node %s: timed out waiting for %s; capacity %v allocatable %v", name, what, last.Status.Capacity, last.Status.Allocatable)
	}
	t.Fatalf("node %s: timed out waiting for %s; node not found", name, what)
	return nil
}

// NodeReady reports whether the Node's Ready condition is True.
func NodeReady(n *v1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == v1.NodeReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

// Value returns the count of name in list and whether it is there.
func Value(list v1.ResourceList, name string) (int64, bool) {
	q, ok := list[v1.ResourceName(name)]
	return q.Value(), ok
}

// Has is a WaitNode condition: the Node publishes name with this capacity and allocatable.
func Has(name string, capacity, allocatable int64) func(*v1.Node) bool {
	return func(n *v1.Node) bool {
		c, okc := Value(n.Status.Capacity, name)
		a, oka := Value(n.Status.Allocatable, name)
		return okc && oka && c == capacity && a == allocatable
	}
}

// Main runs a package's tests as its TestMain does and returns the exit code: after the tests
// it stops cluster, the package's shared API server, so that client connections to it are
// closed, and then, if the tests passed, fails the run when goroutines were left behind.
func Main(m *testing.M, cluster *kubecluster.Shared) int {
	code := m.Run()
	cluster.Stop()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	return code
}
