package podruntime

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	cri "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/kdm-project/kdm/devicemanager"
	"github.com/kdm-project/kdm/internal/containerdtest"
)

// BenchmarkRunPodFloor is the floor under agent's BenchmarkAdmissionToRunning: the CRI calls
// that run a 1-device pod and nothing else, with the configs a Runtime builds for it
// (RunPodSandbox on the host network, CreateContainer with a device node, StartContainer,
// ContainerStatus). The pod's removal runs outside the timer.
func BenchmarkRunPodFloor(b *testing.B) {
	ctd := containerdtest.Start(b)
	probe, sandbox := containerdtest.ImportProbe(b, ctd)
	crt := ctd.Dial(b)
	logs := b.TempDir()
	r, err := New(Config{Endpoint: ctd.Endpoint(), SandboxImage: sandbox, PodLogsDir: logs, Pods: func() []*v1.Pod { return nil }})
	if err != nil {
		b.Fatal(err)
	}
	opts := &devicemanager.RunContainerOptions{
		Envs:    []devicemanager.EnvVar{{Name: "GPU", Value: "gpu-0"}},
		Devices: []devicemanager.DeviceInfo{{PathOnHost: "/dev/null", PathInContainer: "/dev/gpu0", Permissions: "rw"}},
	}
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("floor-%d", i), Namespace: "bench", UID: types.UID(fmt.Sprintf("floor-%d", i))},
			Spec: v1.PodSpec{Containers: []v1.Container{{Name: "main", Image: probe}}}}
		sbCfg := r.sandboxConfig(pod, 0)
		if err := os.MkdirAll(filepath.Join(sbCfg.LogDirectory, "main"), 0o755); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		sb, err := crt.RunPodSandbox(ctx, &cri.RunPodSandboxRequest{Config: sbCfg})
		if err != nil {
			b.Fatal(err)
		}
		c, err := crt.CreateContainer(ctx, &cri.CreateContainerRequest{PodSandboxId: sb.PodSandboxId, SandboxConfig: sbCfg,
			Config: r.containerConfig(pod, &pod.Spec.Containers[0], 0, opts)})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := crt.StartContainer(ctx, &cri.StartContainerRequest{ContainerId: c.ContainerId}); err != nil {
			b.Fatal(err)
		}
		if _, err := crt.ContainerStatus(ctx, &cri.ContainerStatusRequest{ContainerId: c.ContainerId}); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if _, err := crt.StopPodSandbox(ctx, &cri.StopPodSandboxRequest{PodSandboxId: sb.PodSandboxId}); err != nil {
			b.Fatal(err)
		}
		if _, err := crt.RemovePodSandbox(ctx, &cri.RemovePodSandboxRequest{PodSandboxId: sb.PodSandboxId}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}
