package kubecluster

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"
)

// Shared is one cluster for a test package: started by the first test that asks for it and
// stopped by the package's TestMain, so the start cost is paid once per package.
type Shared struct {
	// ModuleDir is the path of test/kubebins from the test package.
	ModuleDir string
	// Nodes are the node identities the cluster knows (Options.Nodes).
	Nodes []string
	// ControlPlane also runs kube-scheduler and kube-controller-manager (Options.ControlPlane).
	ControlPlane bool

	once    sync.Once
	cluster *Cluster
	dir     string
	err     error
}

// Get returns the running cluster, building the binaries and starting it on first use. A test
// that cannot get it fails: the cluster tests are never skipped. When the test fails, the
// servers' logs are printed.
func (s *Shared) Get(t testing.TB) *Cluster {
	t.Helper()
	s.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		bins, err := Build(ctx, s.ModuleDir, os.Stderr)
		if err != nil {
			s.err = err
			return
		}
		if s.dir, err = os.MkdirTemp("", "kdm-cluster"); err != nil {
			s.err = err
			return
		}
		start := time.Now()
		s.cluster, s.err = Start(ctx, Options{Binaries: bins, Dir: s.dir, Nodes: s.Nodes, ControlPlane: s.ControlPlane})
		if s.err == nil {
			what := "kube-apiserver %s and etcd"
			if s.ControlPlane {
				what = "kube-apiserver, kube-scheduler, kube-controller-manager %s and etcd"
			}
			fmt.Fprintf(os.Stderr, "kubecluster: "+what+" ready in %s\n",
				KubernetesVersion, time.Since(start).Round(time.Millisecond))
		}
	})
	if s.err != nil {
		t.Fatalf("test cluster: %v", s.err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(s.cluster.Logs(6000))
		}
	})
	return s.cluster
}

// Stop stops the cluster if it was started and removes its directory.
func (s *Shared) Stop() {
	if s.cluster != nil {
		s.cluster.Stop()
	}
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
	}
}
