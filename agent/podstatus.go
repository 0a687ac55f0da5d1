package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kdm-project/kdm/devicemanager"
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

// PodResult is what the agent writes to <root-dir>/pods/<namespace>_<name>_<uid>.json for each
// pod: the admission outcome and, per container, the device run options and device health.
type PodResult struct {
	Namespace  string            `json:"namespace"`
	Name       string            `json:"name"`
	UID        types.UID         `json:"uid"`
	Phase      string            `json:"phase"`
	Reason     string            `json:"reason,omitempty"`
	Message    string            `json:"message,omitempty"`
	Updated    time.Time         `json:"updated"`
	Containers []ContainerResult `json:"containers,omitempty"`
}

// ContainerResult is one container's devices as the runtime would receive them.
type ContainerResult struct {
	Name                     string                             `json:"name"`
	Init                     bool                               `json:"init,omitempty"`
	Sidecar                  bool                               `json:"sidecar,omitempty"`
	RunOptions               *devicemanager.RunContainerOptions `json:"runOptions,omitempty"`
	AllocatedResourcesStatus []v1.ResourceStatus                `json:"allocatedResourcesStatus,omitempty"`
}

// resultPath names a pod's result file.
func resultPath(dir string, pod *v1.Pod) string {
	return filepath.Join(dir, fmt.Sprintf("%s_%s_%s.json", pod.Namespace, pod.Name, pod.UID))
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

// ReadResults reads every pod result in dir, keyed by pod UID. Unreadable files are skipped.
func ReadResults(dir string) (map[types.UID]*PodResult, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return map[types.UID]*PodResult{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := map[types.UID]*PodResult{}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") || !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		r := &PodResult{}
		if json.Unmarshal(data, r) == nil && r.UID != "" {
			out[r.UID] = r
		}
	}
	return out, nil
}

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
