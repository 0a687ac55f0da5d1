package upstreambench

import (
	"testing"

	kdm "github.com/kdm-project/kdm/devicemanager"
	"github.com/kdm-project/kdm/test/upstreambench/suite"
)

// The benchmarks are in package suite; each runs the newest kubelet (kubeletSide) and kdm. kdm
// runs with the kubelet policy (what the kubelet does, with kdm's fixes that are always on)
// unless the sub-benchmark's name says policy=kdm. Package olderkubelet, built in a module per
// older kubelet minor (kubelet-<minor>/), runs the same benchmarks for that kubelet alone;
// cmd/benchcompare puts each beside kdm.

// sides are the kubelet and kdm replaying the kubelet's policy.
func sides() []suite.Side {
	return []suite.Side{kubeletSide, kdmSide("kdm", kdm.KubeletPolicy())}
}

func BenchmarkAllocate(b *testing.B) { suite.Allocate(b, sides()) }

func BenchmarkCheckpointEncode(b *testing.B) {
	b.Run(suite.CheckpointCase, func(b *testing.B) {
		b.Run(kubeletSide.Name, suite.KubeletCheckpointEncode)
		b.Run("kdm", kdmCheckpointEncode)
	})
}

func BenchmarkCheckpointWrite(b *testing.B) {
	b.Run(suite.CheckpointCase, func(b *testing.B) {
		b.Run(kubeletSide.Name, suite.KubeletCheckpointWrite)
		b.Run("kdm", kdmCheckpointWrite)
	})
}

func BenchmarkCheckpointEncodeChurn(b *testing.B) {
	b.Run(suite.CheckpointCase, func(b *testing.B) {
		b.Run(kubeletSide.Name, suite.KubeletCheckpointEncodeChurn)
		b.Run("kdm", kdmCheckpointEncodeChurn)
	})
}

func BenchmarkCheckpointWriteChurn(b *testing.B) {
	b.Run(suite.CheckpointCase, func(b *testing.B) {
		b.Run(kubeletSide.Name, suite.KubeletCheckpointWriteChurn)
		b.Run("kdm", kdmCheckpointWriteChurn)
	})
}

// BenchmarkListAndWatchUpdate adds kdm's own policy: the kubelet and kdm's kubelet policy
// write the checkpoint on the stream before taking the next update, so in a run of ops each
// op pays for one write even where the count changes before the write; kdm's policy
// coalesces that write in the background.
//
// The large plugins run under the kubelet policy only.
func BenchmarkListAndWatchUpdate(b *testing.B) {
	suite.ListAndWatchUpdate(b, append(sides(), kdmSide("kdm,policy=kdm", kdm.KDMPolicy())), sides())
}

func BenchmarkAllocateBeside(b *testing.B) { suite.AllocateBeside(b, sides()) }

func BenchmarkRestart(b *testing.B) { suite.Restart(b, sides()) }
