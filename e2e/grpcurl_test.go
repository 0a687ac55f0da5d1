package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kdm-project/kdm/agent/statusapi"
)

// TestPodResourcesWithGrpcurl reads a running kdm's assignments with grpcurl, a client nobody
// here wrote, using the api.proto shipped in the k8s.io/kubelet module. CI installs grpcurl;
// elsewhere the test is skipped when it is missing.
func TestPodResourcesWithGrpcurl(t *testing.T) {
	grpcurl, err := exec.LookPath("grpcurl")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("grpcurl is required in CI: %v", err)
		}
		t.Skip("grpcurl not installed (go install github.com/fullstorydev/grpcurl/cmd/grpcurl)")
	}
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "k8s.io/kubelet").Output()
	if err != nil {
		t.Fatalf("locating the k8s.io/kubelet module: %v", err)
	}
	protoDir := filepath.Join(strings.TrimSpace(string(out)), "pkg", "apis", "podresources", "v1")

	n := newNode(t)
	kdm := n.startServing("8 GPUs")
	n.writePod("a", 3)
	st := n.eventually("pod a admitted", func(st statusapi.NodeStatus) bool { return len(visible(pod(st, "a"))) == 3 })
	want := sorted(visible(pod(st, "a")))

	sock := filepath.Join(n.rootDir, "pod-resources", "kubelet.sock")
	call := func(method string) []byte {
		t.Helper()
		cmd := exec.Command(grpcurl, "-plaintext", "-unix", "-import-path", protoDir, "-proto", "api.proto",
			"-d", "{}", sock, "v1.PodResourcesLister/"+method)
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("grpcurl %s: %v\n%s", method, err, b)
		}
		return b
	}
	var list struct {
		PodResources []struct {
			Name       string `json:"name"`
			Containers []struct {
				Devices []struct {
					ResourceName string   `json:"resourceName"`
					DeviceIds    []string `json:"deviceIds"`
				} `json:"devices"`
			} `json:"containers"`
		} `json:"podResources"`
	}
	if err := json.Unmarshal(call("List"), &list); err != nil {
		t.Fatalf("List output: %v", err)
	}
	var got []string
	for _, p := range list.PodResources {
		if p.Name != "a" {
			continue
		}
		for _, c := range p.Containers {
			for _, d := range c.Devices {
				if d.ResourceName == "nvidia.com/gpu" {
					got = append(got, d.DeviceIds...)
				}
			}
		}
	}
	if !slices.Equal(sorted(got), want) {
		t.Fatalf("grpcurl List: pod a holds %v, want %v", got, want)
	}
	var alloc struct {
		Devices []struct {
			DeviceIds []string `json:"deviceIds"`
		} `json:"devices"`
	}
	if err := json.Unmarshal(call("GetAllocatableResources"), &alloc); err != nil {
		t.Fatalf("GetAllocatableResources output: %v", err)
	}
	if len(alloc.Devices) != 8 {
		t.Fatalf("grpcurl GetAllocatableResources: %d devices, want 8", len(alloc.Devices))
	}
	kdm.terminate(t)
}
