package agent

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"
)

// manifestPod is a pod read from the manifest directory, with the file it came from.
type manifestPod struct {
	pod  *v1.Pod
	path string
}

// readManifests reads every manifest in dir. Files starting with "." and files with other
// extensions than .yaml, .yml and .json are ignored, as the kubelet does for its static pod
// path. A bad file is reported and skipped; the others are still returned.
func readManifests(dir string) (map[types.UID]manifestPod, []error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, []error{fmt.Errorf("reading pod manifest directory: %w", err)}
	}
	pods := map[types.UID]manifestPod{}
	var errs []error
	for _, e := range entries {
		name := e.Name()
		ext := strings.ToLower(filepath.Ext(name))
		if e.IsDir() || strings.HasPrefix(name, ".") || (ext != ".yaml" && ext != ".yml" && ext != ".json") {
			continue
		}
		path := filepath.Join(dir, name)
		data, err := os.ReadFile(path)
		if err != nil {
			errs = append(errs, fmt.Errorf("reading pod manifest %s: %w", path, err))
			continue
		}
		pod, err := decodeManifest(data)
		if err != nil {
			errs = append(errs, fmt.Errorf("pod manifest %s: %w", path, err))
			continue
		}
		if prev, dup := pods[pod.UID]; dup {
			errs = append(errs, fmt.Errorf("pod manifest %s: same pod UID %s as %s; ignored", path, pod.UID, prev.path))
			continue
		}
		pods[pod.UID] = manifestPod{pod: pod, path: path}
	}
	return pods, errs
}

// decodeManifest parses one pod (YAML or JSON). The namespace defaults to "default"; a pod
// without a UID gets one derived from its content, so an edited manifest is a new pod, as
// with the kubelet's static pods.
func decodeManifest(data []byte) (*v1.Pod, error) {
	pod := &v1.Pod{}
	if err := yaml.UnmarshalStrict(data, pod); err != nil {
		return nil, fmt.Errorf("not a valid pod: %w", err)
	}
	if pod.Kind != "" && pod.Kind != "Pod" {
		return nil, fmt.Errorf("kind is %q, want Pod", pod.Kind)
	}
	if pod.Name == "" {
		return nil, errors.New("metadata.name is required")
	}
	if len(pod.Spec.Containers) == 0 {
		return nil, errors.New("spec.containers must not be empty")
	}
	if pod.Namespace == "" {
		pod.Namespace = "default"
	}
	if pod.UID == "" {
		sum := sha256.Sum256(data)
		pod.UID = types.UID(fmt.Sprintf("%x-%x-%x-%x-%x", sum[0:4], sum[4:6], sum[6:8], sum[8:10], sum[10:16]))
	}
	return pod, nil
}

// sortedPods returns the pods ordered by namespace, name and UID.
func sortedPods(pods map[types.UID]manifestPod) []*v1.Pod {
	out := make([]*v1.Pod, 0, len(pods))
	for _, p := range pods {
		out = append(out, p.pod)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		return a.UID < b.UID
	})
	return out
}
