package kubecluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TestClusterIdentities starts the real cluster and checks what the agent relies on: the
// version, a node identity that may create its own Node but not another's, and an admin.
func TestClusterIdentities(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real kube-apiserver and etcd; run by make test")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	c, admin := startCluster(ctx, t, Options{Nodes: []string{"n1"}})
	info, err := admin.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if info.GitVersion != KubernetesVersion {
		t.Errorf("server version %q, want %q", info.GitVersion, KubernetesVersion)
	}
	node, err := c.Client("system:node:n1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := node.CoreV1().Nodes().Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("node identity creating its own Node: %v", err)
	}
	_, err = node.CoreV1().Nodes().Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("node identity creating another Node: got %v, want Forbidden", err)
	}
	if _, err := c.Client("system:node:unknown"); err == nil {
		t.Error("an undeclared identity got a client")
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := c.WriteKubeconfig("system:node:n1", kubeconfig); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(kubeconfig); err != nil || fi.Size() == 0 {
		t.Fatalf("kubeconfig not written: %v", err)
	}
}

// TestControlPlane starts the cluster with the scheduler and the controller-manager and checks
// that both act under their identities: a Deployment gets its ReplicaSet and pod from the
// controller-manager, and the scheduler marks the pod unschedulable, there being no node.
func TestControlPlane(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real kube-apiserver, kube-scheduler, kube-controller-manager and etcd; run by make test")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	_, admin := startCluster(ctx, t, Options{ControlPlane: true})
	labels := map[string]string{"app": "web"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: metav1.NamespaceDefault},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: v1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "main", Image: "example.com/web"}}},
			},
		},
	}
	if _, err := admin.AppsV1().Deployments(d.Namespace).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	last := "no pod yet"
	for time.Now().Before(deadline) {
		pods, err := admin.CoreV1().Pods(d.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			for _, cond := range p.Status.Conditions {
				if cond.Type == v1.PodScheduled && cond.Reason == v1.PodReasonUnschedulable {
					return
				}
				last = fmt.Sprintf("pod %s condition %s=%s %s", p.Name, cond.Type, cond.Status, cond.Reason)
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("no pod of the Deployment was marked unschedulable within a minute; last: %s", last)
}

// startCluster builds the binaries (cached), starts a cluster with opts in a temporary
// directory, stops it at cleanup (printing its logs if the test failed) and returns it with
// an admin client.
func startCluster(ctx context.Context, t *testing.T, opts Options) (*Cluster, kubernetes.Interface) {
	t.Helper()
	bins, err := Build(ctx, filepath.Join("..", "..", "test", "kubebins"), os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	opts.Binaries, opts.Dir = bins, t.TempDir()
	c, err := Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(c.Logs(4000))
		}
		c.Stop()
	})
	admin, err := c.Client(AdminUser)
	if err != nil {
		t.Fatal(err)
	}
	return c, admin
}
