package manifests

import (
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
)

// FuzzManifest feeds arbitrary bytes to the manifest decoder and the validator. Neither may
// panic, and a pod they accept must be safe to admit: every device count a whole number in
// [0, maxDeviceCount], requests equal to limits, a UID usable as a file name. Seeds live in
// testdata/fuzz/FuzzManifest; the agent's FuzzManifestResult runs them too, for what the agent
// makes of an accepted pod (its result file, its device requests).
func FuzzManifest(f *testing.F) {
	f.Add([]byte(manifestBody("a", "uid-a", 1)))
	f.Add([]byte("{\"kind\":\"Pod\",\"metadata\":{\"name\":\"j\"},\"spec\":{\"containers\":[{\"name\":\"c\",\"resources\":{\"limits\":{\"x.io/d\":\"0.5\"}}}]}}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		pod, err := Decode(data)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty decode error")
			}
			return
		}
		if err := Validate(pod); err != nil {
			if err.Error() == "" {
				t.Fatal("empty validation error")
			}
			return
		}
		if msg := checkUID(string(pod.UID)); msg != "" {
			t.Fatalf("valid pod with UID %q: %s", pod.UID, msg)
		}
		for _, c := range append(slices.Clone(pod.Spec.InitContainers), pod.Spec.Containers...) {
			r := c.Resources
			for name, q := range r.Limits {
				if !isDomainResource(name) {
					continue
				}
				n, ok := q.AsInt64()
				if !ok || n < 0 || n > maxDeviceCount || q.MilliValue() != n*1000 {
					t.Fatalf("container %s: %s limit %s is not a device count", c.Name, name, q.String())
				}
				if req, ok := r.Requests[name]; ok && req.Cmp(q) != 0 {
					t.Fatalf("container %s: %s request %s differs from limit %s", c.Name, name, req.String(), q.String())
				}
			}
			for name := range r.Requests {
				if _, ok := r.Limits[name]; isDomainResource(name) && !ok {
					t.Fatalf("container %s: %s requested without a limit", c.Name, name)
				}
			}
		}
		for _, list := range []v1.ResourceList{podLevel(pod).Limits, podLevel(pod).Requests} {
			for name := range list {
				if isDomainResource(name) {
					t.Fatalf("pod-level %s accepted", name)
				}
			}
		}
	})
}

func podLevel(pod *v1.Pod) v1.ResourceRequirements {
	if pod.Spec.Resources == nil {
		return v1.ResourceRequirements{}
	}
	return *pod.Spec.Resources
}
