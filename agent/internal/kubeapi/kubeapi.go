// Package kubeapi holds what the agent and its node status publisher both need of the objects
// they write to the API server: the checks a node's resource lists, labels and taints must pass,
// and the strategic merge patch a status write sends.
package kubeapi

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/kdm-project/kdm/internal/resourcename"
)

// ValidateResources rejects negative quantities, device-plugin (extended) resources, which
// only the device manager publishes, and, when allowed is set, names outside it. Names are
// checked in sorted order so the errors come in a stable order; each error begins with what.
func ValidateResources(what string, list v1.ResourceList, allowed []v1.ResourceName) []error {
	var errs []error
	names := make([]v1.ResourceName, 0, len(list))
	for name := range list {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		q := list[name]
		switch {
		case allowed != nil && !slices.Contains(allowed, name):
			errs = append(errs, fmt.Errorf("%s: unsupported resource %q (want one of %s)", what, name, joinNames(allowed)))
		case resourcename.IsExtended(string(name)):
			errs = append(errs, fmt.Errorf("%s: %q is a device resource, published by the device manager only", what, name))
		case q.Sign() < 0:
			errs = append(errs, fmt.Errorf("%s: %s must not be negative: %s", what, name, q.String()))
		}
	}
	return errs
}

func joinNames(names []v1.ResourceName) string {
	s := make([]string, len(names))
	for i, n := range names {
		s[i] = string(n)
	}
	return strings.Join(s, ", ")
}

// ValidateLabels checks keys and values as the API server would, in sorted key order; each
// error begins with what.
func ValidateLabels(what string, labels map[string]string) []error {
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		for _, msg := range validation.IsQualifiedName(k) {
			errs = append(errs, fmt.Errorf("%s: key %q: %s", what, k, msg))
		}
		for _, msg := range validation.IsValidLabelValue(labels[k]) {
			errs = append(errs, fmt.Errorf("%s: value %q of %q: %s", what, labels[k], k, msg))
		}
	}
	return errs
}

// ValidateTaints checks each taint's key, value and effect, in the given order; each error
// begins with what and the taint's index.
func ValidateTaints(what string, taints []v1.Taint) []error {
	var errs []error
	for i, t := range taints {
		for _, msg := range validation.IsQualifiedName(t.Key) {
			errs = append(errs, fmt.Errorf("%s[%d]: key %q: %s", what, i, t.Key, msg))
		}
		for _, msg := range validation.IsValidLabelValue(t.Value) {
			errs = append(errs, fmt.Errorf("%s[%d]: value %q: %s", what, i, t.Value, msg))
		}
		switch t.Effect {
		case v1.TaintEffectNoSchedule, v1.TaintEffectPreferNoSchedule, v1.TaintEffectNoExecute:
		default:
			errs = append(errs, fmt.Errorf("%s[%d]: effect %q: want NoSchedule, PreferNoSchedule or NoExecute", what, i, t.Effect))
		}
	}
	return errs
}

// StatusPatch is the strategic merge patch from old to updated, objects of dataStruct's type
// (v1.Pod{} or v1.Node{}), as the kubelet sends for a status write.
func StatusPatch(old, updated, dataStruct any) ([]byte, error) {
	oldJSON, err := json.Marshal(old)
	if err != nil {
		return nil, err
	}
	newJSON, err := json.Marshal(updated)
	if err != nil {
		return nil, err
	}
	return strategicpatch.CreateTwoWayMergePatch(oldJSON, newJSON, dataStruct)
}
