package agent

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kdm-project/kdm/agent/podresult"
	"github.com/kdm-project/kdm/checkpoint"
)

// TestPreviouslyRunningFromUnversioned: the pod of a result file written by kdm before the
// schema had a version (podresult's testdata/podresult-unversioned.json) counts as running at
// start, and its devices are what the manager restores: the init container's GPUs, the app's
// GPUs and its NIC without topology.
func TestPreviouslyRunningFromUnversioned(t *testing.T) {
	dir := t.TempDir()
	old, err := os.ReadFile(filepath.Join("podresult", "testdata", "podresult-unversioned.json"))
	if err != nil {
		t.Fatal(err)
	}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "training", UID: "6f1c2a9e-0000-4000-8000-000000000001"}}
	if err := os.WriteFile(podresult.Path(dir, pod), old, 0o600); err != nil {
		t.Fatal(err)
	}

	a := &Agent{cfg: Config{PodResultsDir: dir}, results: map[types.UID]*podresult.PodResult{}}
	keys, held, err := a.previouslyRunning()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 || keys[0].ContainerName != "train" {
		t.Errorf("running containers %v, want the app container train", keys)
	}
	if len(held) != 3 {
		t.Fatalf("recovery records %+v, want the init container's GPUs and the app's GPUs and NIC", held)
	}
	if nic := held[2]; nic.ResourceName != "example.com/nic" || !reflect.DeepEqual(nic.DeviceIDs, checkpoint.DevicesPerNUMA{-1: {"nic-a"}}) {
		t.Errorf("NIC record %+v, want nic-a without topology", nic)
	}
}
