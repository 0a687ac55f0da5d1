// Package resourcename holds the one rule kdm applies to device-plugin resource names, the
// kubelet's: an extended resource name. The manager's Register validation, the plugin SDK's
// configuration check, the conformance suite's recording manager, pod validation and the
// node status all use it, so that no two parts of kdm disagree about a name.
package resourcename

import (
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// quotaPrefix is the prefix of a resource quota's request names ("requests.nvidia.com/gpu").
const quotaPrefix = "requests."

// nativePrefix marks the resources Kubernetes itself defines, in any of its domains
// ("kubernetes.io/", "example.kubernetes.io/").
const nativePrefix = "kubernetes.io/"

// IsExtended reports whether name is an extended resource name, which is what a device plugin
// may register and a pod may ask for as a device: domain-qualified (it has a "/"), not in a
// kubernetes.io domain, not a quota name (no "requests." prefix), and still a valid qualified
// name with "requests." put in front of it, so that a quota can name it. This is the
// kubelet's rule (its v1 helper's IsExtendedResourceName).
func IsExtended(name string) bool {
	if !strings.Contains(name, "/") || strings.Contains(name, nativePrefix) || strings.HasPrefix(name, quotaPrefix) {
		return false
	}
	return len(validation.IsQualifiedName(quotaPrefix+name)) == 0
}
