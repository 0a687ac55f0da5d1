package agent

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kdm-project/kdm/agent/manifests"
	"github.com/kdm-project/kdm/agent/podresult"
)

// FuzzManifestResult feeds arbitrary bytes, and the seeds of the manifest package's
// FuzzManifest (manifests/testdata/fuzz/FuzzManifest), to the manifest decoder and validator.
// A pod they accept must be safe for the agent to record and admit: its result file lies
// inside the pods directory, and every extended resource it limits is a device request of
// exactly that count.
func FuzzManifestResult(f *testing.F) {
	f.Add([]byte(manifestBody("a", "uid-a", 1)))
	f.Add([]byte("{\"kind\":\"Pod\",\"metadata\":{\"name\":\"j\"},\"spec\":{\"containers\":[{\"name\":\"c\",\"resources\":{\"limits\":{\"x.io/d\":\"0.5\"}}}]}}"))
	for _, seed := range manifestSeeds(f) {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		pod, err := manifests.Decode(data)
		if err != nil || manifests.Validate(pod) != nil {
			return
		}
		dir := "/var/lib/kdm/pods"
		if p := podresult.Path(dir, pod); filepath.Dir(p) != dir {
			t.Fatalf("result path %s escapes %s", p, dir)
		}
		for _, c := range allContainers(pod) {
			for name, q := range c.container.Resources.Limits {
				// The names Validate checks as device resources: domain-qualified outside
				// kubernetes.io, no quota prefix.
				s := string(name)
				if !strings.Contains(s, "/") || strings.Contains(s, "kubernetes.io/") || strings.HasPrefix(s, "requests.") {
					continue
				}
				n, _ := q.AsInt64()
				if got, ok := deviceRequests(c.container)[s]; !ok || got != n {
					t.Fatalf("deviceRequests says %d (listed %v) for %s, limit %d", got, ok, name, n)
				}
			}
		}
	})
}

// manifestSeeds reads the seed corpus of the manifest package's FuzzManifest: files of the
// form "go test fuzz v1" followed by one []byte("...") line.
func manifestSeeds(f *testing.F) [][]byte {
	f.Helper()
	dir := filepath.Join("manifests", "testdata", "fuzz", "FuzzManifest")
	entries, err := os.ReadDir(dir)
	if err != nil {
		f.Fatal(err)
	}
	var seeds [][]byte
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			f.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		if len(lines) != 2 || lines[0] != "go test fuzz v1" {
			f.Fatalf("%s: not a one-value fuzz corpus file", e.Name())
		}
		quoted, ok := strings.CutPrefix(lines[1], "[]byte(")
		quoted, ok2 := strings.CutSuffix(quoted, ")")
		value, err := strconv.Unquote(quoted)
		if !ok || !ok2 || err != nil {
			f.Fatalf("%s: cannot read %q: %v", e.Name(), lines[1], err)
		}
		seeds = append(seeds, []byte(value))
	}
	return seeds
}
