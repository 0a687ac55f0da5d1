package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	v1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/agent/podresult"
	"github.com/kdm-project/kdm/deviceplugin"
	"github.com/kdm-project/kdm/internal/containerdtest"
)

// BenchmarkAdmissionToRunning measures, for a 1-GPU pod from the manifest directory, the time
// from its admission (its result recorded Admitted, the device allocated and checkpointed) to
// its container running in containerd (the runtime reports phase Running): the sync that picks
// it up, the run options and PreStartContainer, a sandbox on the host network, the container's
// creation with its device node, its start and the status read back. Each op is one pod; the
// pod's removal (containers stopped, devices released) runs outside the timer. The status is
// polled every 500 µs, which bounds the measurement's resolution.
func BenchmarkAdmissionToRunning(b *testing.B) {
	// logr.Discard has no sink, which the configs take for "use the default": a sink that drops
	// everything keeps the benchmark's output readable.
	quiet := funcr.New(func(string, string) {}, funcr.Options{})
	ctd := containerdtest.Start(b)
	probe, sandbox := containerdtest.ImportProbe(b, ctd)
	base, err := os.MkdirTemp("", "kdm-bench")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = os.RemoveAll(base) })
	manifests, plugins := filepath.Join(base, "manifests"), filepath.Join(base, "dp")
	if err := os.MkdirAll(manifests, 0o750); err != nil {
		b.Fatal(err)
	}
	a, err := New(Config{RootDir: filepath.Join(base, "root"), DevicePluginDir: plugins, PodManifestPath: manifests,
		ContainerRuntimeEndpoint: ctd.Endpoint(), SandboxImage: sandbox, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	b.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			b.Errorf("Run: %v", err)
		}
	})
	for {
		if _, err := os.Stat(filepath.Join(plugins, "kubelet.sock")); err == nil {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	plugin, err := deviceplugin.New(deviceplugin.Config{ResourceName: "example.com/gpu", PluginDir: plugins,
		Devices: []*pluginapi.Device{{ID: "gpu-0", Health: pluginapi.Healthy}},
		Logger:  quiet,
		Allocate: func(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
			resp := &pluginapi.AllocateResponse{}
			for range req.ContainerRequests {
				resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{
					Envs:    map[string]string{"GPU": "gpu-0"},
					Devices: []*pluginapi.DeviceSpec{{HostPath: "/dev/null", ContainerPath: "/dev/gpu0", Permissions: "rw"}},
				})
			}
			return resp, nil
		}})
	if err != nil {
		b.Fatal(err)
	}
	if err := plugin.Start(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(plugin.Stop)

	poll := func(what string, cond func(*podresult.PodResult) bool, name string) {
		deadline := time.Now().Add(60 * time.Second)
		for {
			a.mu.Lock()
			var r *podresult.PodResult
			for _, res := range a.results {
				if res.Name == name {
					r = res
				}
			}
			a.mu.Unlock()
			if cond(r) {
				return
			}
			if time.Now().After(deadline) {
				b.Fatalf("%s %s: timed out; result %+v", name, what, r)
			}
			time.Sleep(500 * time.Microsecond)
		}
	}
	body := "apiVersion: v1\nkind: Pod\nmetadata:\n  name: %s\n  namespace: bench\n  uid: bench-%d\nspec:\n  terminationGracePeriodSeconds: 1\n" +
		"  containers:\n  - name: main\n    image: %s\n    resources:\n      limits:\n        example.com/gpu: 1\n"
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		name := fmt.Sprintf("pod-%d", i)
		file := filepath.Join(manifests, name+".yaml")
		if err := os.WriteFile(file+".tmp", fmt.Appendf(nil, body, name, i, probe), 0o600); err != nil {
			b.Fatal(err)
		}
		if err := os.Rename(file+".tmp", file); err != nil {
			b.Fatal(err)
		}
		poll("admitted", func(r *podresult.PodResult) bool { return r != nil && r.Phase == podresult.PhaseAdmitted }, name)
		b.StartTimer()
		poll("running", func(r *podresult.PodResult) bool {
			return r != nil && r.Runtime != nil && r.Runtime.Phase == v1.PodRunning
		}, name)
		b.StopTimer()
		if err := os.Remove(file); err != nil {
			b.Fatal(err)
		}
		poll("removed", func(r *podresult.PodResult) bool { return r == nil }, name)
		b.StartTimer()
	}
}
