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

// TestSideName: a binary built with its name says so, and one built without it is marked
// rather than taking another release's name.
func TestSideName(t *testing.T) {
	if name == "" && kubeletSide.Name != "kubelet-unknown" {
		t.Errorf("unnamed binary's side is %q", kubeletSide.Name)
	}
	if name != "" && kubeletSide.Name != name {
		t.Errorf("side %q, built as %q", kubeletSide.Name, name)
	}
}
