package agent

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/kdm-project/kdm/checkpoint"
	"github.com/kdm-project/kdm/devicemanager"
	"github.com/kdm-project/kdm/internal/hostfile"
	"github.com/kdm-project/kdm/internal/resourcename"
)

// Pod phases the agent records.
const (
	PhaseAdmitted = "Admitted"
	PhaseRejected = "Rejected"
	PhasePending  = "Pending" // admission is waiting (deferred admission)
)

// ReasonUnexpectedAdmissionError is the kubelet's reason for a pod whose device allocation
// failed.
const ReasonUnexpectedAdmissionError = "UnexpectedAdmissionError"

// ReasonInvalidPod is the reason recorded for a pod that fails validation (manifests.Validate).
// Such a pod is rejected before admission: it never reaches Allocate and holds no device.
const ReasonInvalidPod = "InvalidPod"

// PodResult is what the agent writes to <root-dir>/kdm/pods/<namespace>_<name>_<uid>.json for each
// pod: the admission outcome and, per container, the device run options and device health. Its
// JSON form is the versioned schema of docs/pod-results.md (MarshalJSON); UnmarshalJSON also
// reads the unversioned results of earlier kdm versions.
type PodResult struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	UID       types.UID `json:"uid"`
	Phase     string    `json:"phase"`
	Reason    string    `json:"reason,omitempty"`
	Message   string    `json:"message,omitempty"`
	// Warning says what kdm kept from an earlier admission instead of following the source,
	// such as a device request edited under a running pod.
	Warning string `json:"warning,omitempty"`
	// Conflicts are the devices that this pod's restored assignment shares with other pods'
	// (devicemanager.Contest): each stays assigned to every claimant and is given to no other
	// pod until one claimant is left.
	Conflicts  []DeviceConflict  `json:"conflicts,omitempty"`
	Updated    time.Time         `json:"updated"`
	Containers []ContainerResult `json:"containers,omitempty"`
	// Runtime is what runs of the pod: its containers' states as the container runtime
	// reports them, or, when kdm runs no containers, a plain statement of that. Absent in
	// results written before kdm could run containers.
	Runtime *RuntimeStatus `json:"runtime,omitempty"`
}

// DeviceConflict is one device that the pod and other pods claim (see PodResult.Conflicts).
type DeviceConflict struct {
	Resource string `json:"resource"`
	DeviceID string `json:"deviceID"`
	// Pods are the other claimants: namespace/name, or the UID of a pod the agent does not
	// know.
	Pods []string `json:"pods"`
}

// ConflictWarning says what the pod's conflicts mean and how an operator ends them; empty
// without conflicts.
func (r *PodResult) ConflictWarning() string {
	if len(r.Conflicts) == 0 {
		return ""
	}
	parts := make([]string, 0, len(r.Conflicts))
	for _, c := range r.Conflicts {
		parts = append(parts, fmt.Sprintf("%s %s is also claimed by %s", c.Resource, c.DeviceID, strings.Join(c.Pods, ", ")))
	}
	return "restored records disagree: " + strings.Join(parts, "; ") +
		". The device stays with these pods and goes to no other; delete the pod that should not hold it."
}

// ContainerResult is one container's devices as the runtime would receive them. Its JSON form
// is the kdm.io/v1 schema of docs/pod-results.md (MarshalJSON).
type ContainerResult struct {
	Name       string
	Init       bool
	Sidecar    bool
	RunOptions *devicemanager.RunContainerOptions
	// AllocatedResourcesStatus is the health of the container's devices, as the kubelet
	// reports it in the Pod's status.
	AllocatedResourcesStatus []v1.ResourceStatus
	// Requests are the container's device requests (extended-resource limits) as admitted.
	Requests map[string]int64
	// Allocations are the container's devices as the checkpoint holds them: kdm's second copy,
	// from which assignments are restored when the checkpoint is lost.
	Allocations []Allocation
}

// Allocation is one resource's devices of one container, with the NUMA nodes recorded at
// allocation time and the plugin's Allocate response (protobuf bytes), in the checkpoint's
// form. Its JSON form lists each device once with its NUMA nodes and the response as plain
// JSON (docs/pod-results.md).
type Allocation struct {
	Resource  string
	DeviceIDs checkpoint.DevicesPerNUMA
	AllocResp []byte
}

// Devices returns the container's device IDs per resource, sorted, each listed once.
func (c ContainerResult) Devices() map[string][]string {
	out := map[string][]string{}
	for _, a := range c.Allocations {
		seen := map[string]bool{}
		for _, ids := range a.DeviceIDs {
			for _, id := range ids {
				if !seen[id] {
					seen[id] = true
					out[a.Resource] = append(out[a.Resource], id)
				}
			}
		}
		sort.Strings(out[a.Resource])
	}
	return out
}

// unhealthyDevices returns the IDs AllocatedResourcesStatus says are Unhealthy, sorted; nil
// when none is.
func (c ContainerResult) unhealthyDevices() []string {
	var out []string
	for _, rs := range c.AllocatedResourcesStatus {
		for _, h := range rs.Resources {
			if h.Health == v1.ResourceHealthStatusUnhealthy {
				out = append(out, string(h.ResourceID))
			}
		}
	}
	slices.Sort(out)
	return out
}

// resultPath names a pod's result file inside dir: <namespace>_<name>_<uid>.json when every
// part is made of letters, digits, '.', '-' and '_' and the name fits a file name, and
// pod-<sha256 of the three>.json otherwise. The result is always a single file name below dir,
// whatever the pod's metadata holds.
func resultPath(dir string, pod *v1.Pod) string {
	name := fmt.Sprintf("%s_%s_%s.json", pod.Namespace, pod.Name, pod.UID)
	if !safeFileName(name) || pod.Namespace == "" || pod.Name == "" || pod.UID == "" {
		sum := sha256.Sum256([]byte(pod.Namespace + "\x00" + pod.Name + "\x00" + string(pod.UID)))
		name = fmt.Sprintf("pod-%x.json", sum[:16])
	}
	return filepath.Join(dir, name)
}

// maxFileName is the longest file name the common Linux file systems take.
const maxFileName = 255

// safeFileName reports whether name is a plain, visible file name of portable characters.
func safeFileName(name string) bool {
	if len(name) > maxFileName || strings.HasPrefix(name, ".") {
		return false
	}
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '-', r == '_':
		default:
			return false
		}
	}
	return filepath.IsLocal(name) && filepath.Base(name) == name
}

// writeResult writes the result atomically (temp file, fsync, rename).
func writeResult(dir string, pod *v1.Pod, r *PodResult) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".pod-*.tmp")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, werr := f.Write(append(data, '\n'))
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("writing pod result for %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	if err := os.Rename(tmp, resultPath(dir, pod)); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}

// ReadResults reads every pod result in dir, keyed by pod UID. Files that cannot be read or
// decoded are skipped (the agent logs them at start: see readResults).
func ReadResults(dir string) (map[types.UID]*PodResult, error) {
	out, _, err := readResults(dir)
	return out, err
}

// readResults is ReadResults, and also says why each skipped *.json file was skipped.
func readResults(dir string) (map[types.UID]*PodResult, []error, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return map[types.UID]*PodResult{}, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	out := map[types.UID]*PodResult{}
	var skipped []error
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") || !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		r, err := readResult(filepath.Join(dir, e.Name()))
		if err != nil {
			skipped = append(skipped, err)
			continue
		}
		out[r.UID] = r
	}
	return out, skipped, nil
}

// readResult reads and decodes one pod result file.
func readResult(path string) (*PodResult, error) {
	data, _, err := hostfile.Read(path, maxResultSize, false)
	if err != nil {
		return nil, fmt.Errorf("pod result %s: %w", path, err)
	}
	r := &PodResult{}
	if err := json.Unmarshal(data, r); err != nil {
		return nil, fmt.Errorf("pod result %s: %w", path, err)
	}
	if r.UID == "" {
		return nil, fmt.Errorf("pod result %s: no pod UID", path)
	}
	return r, nil
}

// maxResultSize bounds what ReadResults reads of one file; kdm writes a few KiB per pod.
const maxResultSize = 4 << 20

// cleanStaleTemps removes result temp files left by a crash.
func cleanStaleTemps(dir string) {
	matches, _ := filepath.Glob(filepath.Join(dir, ".pod-*.tmp"))
	for _, m := range matches {
		_ = os.Remove(m)
	}
}

// podOf rebuilds the identifying part of a pod from its result.
func podOf(r *PodResult) *v1.Pod {
	p := &v1.Pod{}
	p.Namespace, p.Name, p.UID = r.Namespace, r.Name, r.UID
	return p
}

// deviceRequests lists the container's extended-resource limits: what it asks of device
// plugins.
func deviceRequests(c *v1.Container) map[string]int64 {
	var out map[string]int64
	for name, q := range c.Resources.Limits {
		if !isExtendedResource(name) {
			continue
		}
		if out == nil {
			out = map[string]int64{}
		}
		out[string(name)] = q.Value()
	}
	return out
}

// isExtendedResource reports whether name is a resource a device plugin may serve, by the
// kubelet's rule (resourcename.IsExtended).
func isExtendedResource(name v1.ResourceName) bool { return resourcename.IsExtended(string(name)) }

// IsExtendedResourceName reports whether name is an extended resource name, the kubelet's rule
// (resourcename.IsExtended): domain-qualified outside the kubernetes.io domains, not a quota
// "requests." name, and a valid qualified name. Device-plugin resources are.
func IsExtendedResourceName(name v1.ResourceName) bool {
	return resourcename.IsExtended(string(name))
}

// allocationsOf converts checkpoint entries to the result's form.
func allocationsOf(entries []checkpoint.PodDevicesEntry) []Allocation {
	var out []Allocation
	for _, e := range entries {
		out = append(out, Allocation{Resource: e.ResourceName, DeviceIDs: e.DeviceIDs, AllocResp: e.AllocResp})
	}
	return out
}

// joinWarnings joins the non-empty warnings into one text.
func joinWarnings(ws ...string) string {
	return strings.Join(slices.DeleteFunc(ws, func(w string) bool { return w == "" }), " ")
}

// fillConflicts sets the result's Conflicts from the manager's contested devices, naming the
// other claimants as the agent knows them, and logs when the pod's conflicts change.
func (a *Agent) fillConflicts(pod *v1.Pod, r *PodResult) {
	contests := a.manager.ContestsOf(string(pod.UID))
	a.mu.Lock()
	var prev []DeviceConflict
	if old := a.results[pod.UID]; old != nil {
		prev = old.Conflicts
	}
	r.Conflicts = nil
	for _, c := range contests {
		dc := DeviceConflict{Resource: c.Resource, DeviceID: c.DeviceID}
		for _, uid := range c.PodUIDs {
			if types.UID(uid) != pod.UID {
				dc.Pods = append(dc.Pods, a.podNameLocked(types.UID(uid)))
			}
		}
		r.Conflicts = append(r.Conflicts, dc)
	}
	a.mu.Unlock()
	if equalConflicts(prev, r.Conflicts) {
		return
	}
	log := a.log.WithValues("pod", klog.KObj(pod), "podUID", pod.UID)
	if len(r.Conflicts) == 0 {
		log.Info("Pod's contested devices are its own again: the other claimants are gone")
		return
	}
	for _, c := range r.Conflicts {
		log.Info("Warning: pod's restored devices are also claimed by other pods; the device is given to no other pod until one claimant is left",
			"resourceName", c.Resource, "deviceID", c.DeviceID, "otherPods", c.Pods)
	}
}

// podNameLocked names a pod as namespace/name from the source or its result, or by its UID.
// Callers hold mu.
func (a *Agent) podNameLocked(uid types.UID) string {
	if p := a.pods[uid]; p != nil {
		return p.Namespace + "/" + p.Name
	}
	if r := a.results[uid]; r != nil {
		return r.Namespace + "/" + r.Name
	}
	return string(uid)
}

func equalConflicts(a, b []DeviceConflict) bool {
	return slices.EqualFunc(a, b, func(x, y DeviceConflict) bool {
		return x.Resource == y.Resource && x.DeviceID == y.DeviceID && slices.Equal(x.Pods, y.Pods)
	})
}
