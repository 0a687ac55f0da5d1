package kubecluster

import (
	"os"
	"regexp"
	"testing"
)

// TestKubebinsPinsKubernetesVersion: the module the test cluster's binaries are built from
// pins the release KubernetesVersion names (the newest kubelet row's), so that the apiserver
// reports what the table says and the binary cache is keyed by what is really built.
func TestKubebinsPinsKubernetesVersion(t *testing.T) {
	gomod, err := os.ReadFile("../../test/kubebins/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*k8s\.io/kubernetes (v\S+)`).FindSubmatch(gomod)
	if m == nil {
		t.Fatal("test/kubebins/go.mod requires no k8s.io/kubernetes")
	}
	if got := string(m[1]); got != KubernetesVersion {
		t.Errorf("test/kubebins/go.mod pins k8s.io/kubernetes %s, KubernetesVersion is %s (the newest kubelet row's): move the module with the table", got, KubernetesVersion)
	}
}
