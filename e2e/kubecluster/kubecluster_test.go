package kubecluster

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestClusterIdentities starts the real cluster and checks what the agent relies on: the
// version, a node identity that may create its own Node but not another's, and an admin.
func TestClusterIdentities(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real kube-apiserver and etcd; run by make test")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	bins, err := Build(ctx, filepath.Join("..", "..", "test", "kubebins"), os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Start(ctx, Options{Binaries: bins, Dir: t.TempDir(), Nodes: []string{"n1"}})
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
