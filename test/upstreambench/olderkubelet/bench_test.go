//go:build olderkubelet

package olderkubelet

import (
	"os"
	"testing"

	"github.com/kdm-project/kdm/test/upstreambench/suite"
)

// TestMain silences the kubelet's global klog output and registers the kubelet's metrics,
// which a running kubelet always has, as the parent module does.
func TestMain(m *testing.M) {
	if suite.RunPluginProcess() { // this binary was started as a plugin (suite.PluginProcess)
		return
	}
	setup()
	os.Exit(m.Run())
}

// The parent module's benchmarks under the same names, for this kubelet release alone: kdm is
// measured once, by the parent module's binary, in the same rounds.

var sides = []suite.Side{kubeletSide}

func BenchmarkAllocate(b *testing.B) { suite.Allocate(b, sides) }

func BenchmarkCheckpointEncode(b *testing.B) {
	b.Run(suite.CheckpointCase, func(b *testing.B) { b.Run(kubeletSide.Name, suite.KubeletCheckpointEncode) })
}

func BenchmarkCheckpointWrite(b *testing.B) {
	b.Run(suite.CheckpointCase, func(b *testing.B) { b.Run(kubeletSide.Name, suite.KubeletCheckpointWrite) })
}

func BenchmarkCheckpointEncodeChurn(b *testing.B) {
	b.Run(suite.CheckpointCase, func(b *testing.B) { b.Run(kubeletSide.Name, suite.KubeletCheckpointEncodeChurn) })
}

func BenchmarkCheckpointWriteChurn(b *testing.B) {
	b.Run(suite.CheckpointCase, func(b *testing.B) { b.Run(kubeletSide.Name, suite.KubeletCheckpointWriteChurn) })
}

func BenchmarkListAndWatchUpdate(b *testing.B) { suite.ListAndWatchUpdate(b, sides, sides) }

func BenchmarkAllocateBeside(b *testing.B) { suite.AllocateBeside(b, sides) }

func BenchmarkRestart(b *testing.B) { suite.Restart(b, sides) }

// TestKubeletConstructor checks the go:linkname'd constructor against the pinned kubelet (see
// suite.CheckConstructor).
func TestKubeletConstructor(t *testing.T) { suite.CheckConstructor(t, kubeletSide) }

// TestRestartSettles checks that no write of one Restart op runs inside the next (see
// suite.CheckRestartSettles).
func TestRestartSettles(t *testing.T) { suite.CheckRestartSettles(t, kubeletSide) }

// TestPluginProcess checks the large benchmarks' plugin process against the pinned kubelet
// (see suite.CheckPluginProcess).
func TestPluginProcess(t *testing.T) { suite.CheckPluginProcess(t, kubeletSide) }

// TestSideName: the binary knows which kubelet release it was built with, and names it as the
// table does; minorName turns a release tag into that name.
func TestSideName(t *testing.T) {
	if kubeletSide.Name == "kubelet-unknown" {
		t.Fatal("no k8s.io/kubernetes in the binary's build information")
	}
	for version, want := range map[string]string{"v1.35.4": "kubelet-1.35", "v1.36.0-rc.1": "kubelet-1.36", "": "kubelet-unknown", "v1": "kubelet-unknown"} {
		if got := minorName(version); got != want {
			t.Errorf("minorName(%q) = %q, want %q", version, got, want)
		}
	}
}
