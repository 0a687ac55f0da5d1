package agent

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/kdm-project/kdm/agent/manifests"
)

// manifestGPUPod is a valid manifest pod whose one container asks for one example.com/gpu and half a
// CPU.
func manifestGPUPod(t *testing.T) *v1.Pod {
	t.Helper()
	p, err := manifests.Decode([]byte(manifestBody("web-0", "uid-web", 1)))
	if err != nil {
		t.Fatal(err)
	}
	p.Spec.Containers[0].Resources.Limits[v1.ResourceCPU] = resource.MustParse("500m")
	return p
}

func TestRequestsWarningAndWithRequests(t *testing.T) {
	p := manifestGPUPod(t)
	admitted := admittedRequestsOf(p)
	if w := requestsWarning(admitted, p); w != "" {
		t.Fatalf("same pod warns: %s", w)
	}
	changed := p.DeepCopy()
	changed.Spec.Containers[0].Resources.Limits["example.com/gpu"] = resource.MustParse("2")
	changed.Spec.Containers[0].Resources.Requests = v1.ResourceList{"example.com/gpu": resource.MustParse("2")}
	w := requestsWarning(admitted, changed)
	if !strings.Contains(w, `container "main" example.com/gpu changed from 1 to 2`) {
		t.Fatalf("warning %q", w)
	}
	kept := withRequests(changed, admitted)
	if w := requestsWarning(admitted, kept); w != "" {
		t.Fatalf("the kept pod still differs: %s", w)
	}
	if err := manifests.Validate(kept); err != nil {
		t.Fatalf("kept pod invalid: %v", err)
	}
	if q := kept.Spec.Containers[0].Resources.Limits[v1.ResourceCPU]; q.String() != "500m" {
		t.Fatalf("the CPU limit changed: %s", q.String())
	}
	if q := changed.Spec.Containers[0].Resources.Limits["example.com/gpu"]; q.Value() != 2 {
		t.Fatalf("withRequests changed its input: %s", q.String())
	}
}

func TestIsExtendedResourceName(t *testing.T) {
	for name, want := range map[string]bool{
		"nvidia.com/gpu": true, "example.com/gpu": true, "cpu": false, "memory": false,
		"hugepages-2Mi": false, "kubernetes.io/foo": false, "node.kubernetes.io/x": false,
		"requests.nvidia.com/gpu": false, "attachable-volumes-csi-x": false,
	} {
		if got := IsExtendedResourceName(v1.ResourceName(name)); got != want {
			t.Errorf("IsExtendedResourceName(%q) = %v, want %v", name, got, want)
		}
	}
}
