package agent

import (
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
)

// FuzzManifest feeds arbitrary bytes to the manifest decoder and the validator. Neither may
// panic, and a pod they accept must be safe to admit: every device count a whole number in
// [0, maxDeviceCount], requests equal to limits, a UID usable as a file name, and a result
// file inside the pods directory. Seeds live in testdata/fuzz/FuzzManifest.
func FuzzManifest(f *testing.F) {
	f.Add([]byte(manifestBody("a", "uid-a", 1)))
	f.Add([]byte("{\"kind\":\"Pod\",\"metadata\":{\"name\":\"j\"},\"spec\":{\"containers\":[{\"name\":\"c\",\"resources\":{\"limits\":{\"x.io/d\":\"0.5\"}}}]}}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		pod, err := decodeManifest(data)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty decode error")
			}
			return
		}
		if err := validatePod(pod); err != nil {
			if err.Error() == "" {
				t.Fatal("empty validation error")
			}
			return
		}
		if msg := checkUID(string(pod.UID)); msg != "" {
			t.Fatalf("valid pod with UID %q: %s", pod.UID, msg)
		}
		dir := "/var/lib/kdm/pods"
		if p := resultPath(dir, pod); filepath.Dir(p) != dir {
			t.Fatalf("result path %s escapes %s", p, dir)
		}
		for _, c := range allContainers(pod) {
			r := c.container.Resources
			for name, q := range r.Limits {
				if !isDomainResource(name) {
					continue
				}
				n, ok := q.AsInt64()
				if !ok || n < 0 || n > maxDeviceCount || q.MilliValue() != n*1000 {
					t.Fatalf("container %s: %s limit %s is not a device count", c.container.Name, name, q.String())
				}
				if got := deviceRequests(c.container)[string(name)]; got != n {
					t.Fatalf("deviceRequests says %d for %s, limit %d", got, name, n)
				}
				if req, ok := r.Requests[name]; ok && req.Cmp(q) != 0 {
					t.Fatalf("container %s: %s request %s differs from limit %s", c.container.Name, name, req.String(), q.String())
				}
			}
			for name := range r.Requests {
				if _, ok := r.Limits[name]; isDomainResource(name) && !ok {
					t.Fatalf("container %s: %s requested without a limit", c.container.Name, name)
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
