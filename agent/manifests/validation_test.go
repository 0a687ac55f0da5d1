package manifests

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// validPod is a pod that passes validation: one container asking for one example.com/gpu.
func validPod() *v1.Pod {
	p := &v1.Pod{}
	p.Name, p.Namespace, p.UID = "web-0", "default", "6f1c2c1e-2d8a-4a57-9d3e-0c1b7f1f2a10"
	p.Spec.Containers = []v1.Container{{Name: "main", Resources: v1.ResourceRequirements{
		Limits: v1.ResourceList{"example.com/gpu": resource.MustParse("1"), v1.ResourceCPU: resource.MustParse("500m")},
	}}}
	return p
}

func TestValidatePod(t *testing.T) {
	gpu := v1.ResourceName("example.com/gpu")
	limit := func(q string) func(*v1.Pod) {
		return func(p *v1.Pod) { p.Spec.Containers[0].Resources.Limits[gpu] = resource.MustParse(q) }
	}
	for _, tc := range []struct {
		name   string
		change func(*v1.Pod)
		want   string // substring of the error; "" means valid
	}{
		{"valid", func(*v1.Pod) {}, ""},
		{"zero devices", limit("0"), ""},
		{"integer in exponent form", limit("1e1"), ""},
		{"request equal to limit", func(p *v1.Pod) {
			p.Spec.Containers[0].Resources.Requests = v1.ResourceList{gpu: resource.MustParse("1")}
		}, ""},
		{"fractional CPU is fine", func(p *v1.Pod) {
			p.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceCPU: resource.MustParse("250m")}
		}, ""},
		{"half a device", limit("0.5"), `spec.containers[0].resources.limits[example.com/gpu]: Invalid value: "500m": must be a whole number`},
		{"milli devices", limit("1500m"), "must be a whole number"},
		{"nano devices", limit("1000000001n"), "must be a whole number"},
		{"negative", limit("-1"), `Invalid value: "-1": must be a whole, non-negative number`},
		{"huge", limit("99999999999999999999"), "must be at most 2147483648 devices"},
		{"just too many", limit("2147483649"), "must be at most 2147483648 devices"},
		{"huge negative", limit("-99999999999999999999"), "non-negative"},
		{"request without limit", func(p *v1.Pod) {
			delete(p.Spec.Containers[0].Resources.Limits, gpu)
			p.Spec.Containers[0].Resources.Requests = v1.ResourceList{gpu: resource.MustParse("1")}
		}, "spec.containers[0].resources.limits[example.com/gpu]: Required value: a limit is required"},
		{"request below limit", func(p *v1.Pod) {
			p.Spec.Containers[0].Resources.Limits[gpu] = resource.MustParse("2")
			p.Spec.Containers[0].Resources.Requests = v1.ResourceList{gpu: resource.MustParse("1")}
		}, `spec.containers[0].resources.requests[example.com/gpu]: Invalid value: "1": must equal the limit 2`},
		{"bad resource name", func(p *v1.Pod) {
			p.Spec.Containers[0].Resources.Limits["example.com/-gpu-"] = resource.MustParse("1")
		}, "limits[example.com/-gpu-]"},
		{"init container fraction", func(p *v1.Pod) {
			p.Spec.InitContainers = []v1.Container{{Name: "init", Resources: v1.ResourceRequirements{Limits: v1.ResourceList{gpu: resource.MustParse("0.5")}}}}
		}, "spec.initContainers[0].resources.limits[example.com/gpu]"},
		{"sidecar without limit", func(p *v1.Pod) {
			p.Spec.InitContainers = []v1.Container{{Name: "side", RestartPolicy: ptr.To(v1.ContainerRestartPolicyAlways),
				Resources: v1.ResourceRequirements{Requests: v1.ResourceList{gpu: resource.MustParse("1")}}}}
		}, "spec.initContainers[0].resources.limits[example.com/gpu]: Required value"},
		{"ephemeral container with a device", func(p *v1.Pod) {
			p.Spec.EphemeralContainers = []v1.EphemeralContainer{{EphemeralContainerCommon: v1.EphemeralContainerCommon{
				Name: "debug", Resources: v1.ResourceRequirements{Limits: v1.ResourceList{gpu: resource.MustParse("1")}}}}}
		}, "spec.ephemeralContainers[0].resources.limits[example.com/gpu]: Forbidden"},
		{"pod-level device", func(p *v1.Pod) {
			p.Spec.Resources = &v1.ResourceRequirements{Limits: v1.ResourceList{gpu: resource.MustParse("1")}}
		}, "spec.resources.limits[example.com/gpu]: Forbidden"},
		{"duplicate container name", func(p *v1.Pod) {
			p.Spec.InitContainers = []v1.Container{{Name: "main"}}
		}, `spec.containers[0].name: Duplicate value: "main"`},
		{"container name not a label", func(p *v1.Pod) { p.Spec.Containers[0].Name = "Main_1" }, "spec.containers[0].name"},
		{"name with a slash", func(p *v1.Pod) { p.Name = "a/b" }, `metadata.name: Invalid value: "a/b"`},
		{"name too long", func(p *v1.Pod) { p.Name = strings.Repeat("x", 300) }, "metadata.name: Invalid value: \"xxxxxxxx"},
		{"namespace not a label", func(p *v1.Pod) { p.Namespace = "a.b" }, `metadata.namespace: Invalid value: "a.b"`},
		{"uid traversal", func(p *v1.Pod) { p.UID = "/../../../victimdir/victim" }, `metadata.uid: Invalid value: "/../../../victimdir/victim"`},
		{"uid dot-dot", func(p *v1.Pod) { p.UID = ".." }, `metadata.uid: Invalid value: ".."`},
		{"uid empty", func(p *v1.Pod) { p.UID = "" }, "metadata.uid"},
		{"uid NUL", func(p *v1.Pod) { p.UID = "a\x00b" }, "metadata.uid"},
		{"uid too long", func(p *v1.Pod) { p.UID = types.UID("u" + strings.Repeat("0", 128)) }, "at most 128 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := validPod()
			tc.change(p)
			err := Validate(p)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("valid pod rejected: %v", err)
			case tc.want != "" && err == nil:
				t.Fatalf("invalid pod accepted; want an error containing %q", tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Fatalf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

// TestValidatePodMessageIsBounded: a long value is shortened in the message.
func TestValidatePodMessageIsBounded(t *testing.T) {
	p := validPod()
	p.Name = strings.Repeat("n", 100000)
	err := Validate(p)
	if err == nil || len(err.Error()) > 1000 {
		t.Fatalf("message for a 100000-byte name is %d bytes", len(err.Error()))
	}
}
