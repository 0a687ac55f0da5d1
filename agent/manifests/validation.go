package manifests

import (
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// maxUIDLength bounds a pod UID; kdm uses the UID in file names and checkpoint keys.
const maxUIDLength = 128

// maxDeviceCount is the largest device count a container may ask for per resource. Any real
// node has far fewer devices; the bound keeps every count well inside int64.
const maxDeviceCount = 1 << 31

// maxQuantity is maxDeviceCount as a quantity.
var maxQuantity = *resource.NewQuantity(maxDeviceCount, resource.DecimalSI)

// Validate checks the parts of a pod that device admission and kdm's files depend on, with
// the API server's rules for them: the name is a DNS-1123 subdomain, the namespace a DNS-1123
// label, the UID one safe path component; container names are unique DNS-1123 labels; every
// extended resource of every container (init, sidecar, app) has a limit that is a whole,
// non-negative count and a request, if any, equal to it. Extended resources are not accepted
// at pod level or on ephemeral containers. It returns nil for a valid pod and otherwise one
// error naming every offending field and value.
func Validate(pod *v1.Pod) error {
	var errs field.ErrorList
	meta := field.NewPath("metadata")
	for _, msg := range validation.IsDNS1123Subdomain(pod.Name) {
		errs = append(errs, field.Invalid(meta.Child("name"), shorten(pod.Name), msg))
	}
	for _, msg := range validation.IsDNS1123Label(pod.Namespace) {
		errs = append(errs, field.Invalid(meta.Child("namespace"), shorten(pod.Namespace), msg))
	}
	if msg := checkUID(string(pod.UID)); msg != "" {
		errs = append(errs, field.Invalid(meta.Child("uid"), shorten(string(pod.UID)), msg))
	}
	spec := field.NewPath("spec")
	names := map[string]bool{}
	for _, c := range []struct {
		path       *field.Path
		containers []v1.Container
	}{
		{spec.Child("initContainers"), pod.Spec.InitContainers},
		{spec.Child("containers"), pod.Spec.Containers},
	} {
		for i := range c.containers {
			ctr := &c.containers[i]
			p := c.path.Index(i)
			for _, msg := range validation.IsDNS1123Label(ctr.Name) {
				errs = append(errs, field.Invalid(p.Child("name"), shorten(ctr.Name), msg))
			}
			if names[ctr.Name] {
				errs = append(errs, field.Duplicate(p.Child("name"), ctr.Name))
			}
			names[ctr.Name] = true
			errs = append(errs, validateDeviceResources(ctr.Resources, p.Child("resources"))...)
		}
	}
	for i, c := range pod.Spec.EphemeralContainers {
		p := spec.Child("ephemeralContainers").Index(i).Child("resources")
		errs = append(errs, forbidExtended(c.Resources.Limits, p.Child("limits"), "ephemeral containers take no devices")...)
		errs = append(errs, forbidExtended(c.Resources.Requests, p.Child("requests"), "ephemeral containers take no devices")...)
	}
	if r := pod.Spec.Resources; r != nil {
		p := spec.Child("resources")
		errs = append(errs, forbidExtended(r.Limits, p.Child("limits"), "extended resources are set per container, not per pod")...)
		errs = append(errs, forbidExtended(r.Requests, p.Child("requests"), "extended resources are set per container, not per pod")...)
	}
	return errs.ToAggregate()
}

// validateDeviceResources checks one container's extended resources: each has a limit, the
// limit is a whole count in [0, maxDeviceCount], and a request equals the limit (extended
// resources cannot be overcommitted).
func validateDeviceResources(r v1.ResourceRequirements, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, name := range sortedNames(r.Limits) {
		q := r.Limits[name]
		if !isDomainResource(name) {
			continue
		}
		lp := p.Child("limits").Key(string(name))
		if msg := checkResourceName(name); msg != "" {
			errs = append(errs, field.Invalid(lp, string(name), msg))
			continue
		}
		if msg := checkDeviceCount(q); msg != "" {
			errs = append(errs, field.Invalid(lp, q.String(), msg))
			continue
		}
		if req, ok := r.Requests[name]; ok && req.Cmp(q) != 0 {
			errs = append(errs, field.Invalid(p.Child("requests").Key(string(name)), req.String(),
				fmt.Sprintf("must equal the limit %s: extended resources cannot be overcommitted", q.String())))
		}
	}
	for _, name := range sortedNames(r.Requests) {
		q := r.Requests[name]
		if _, ok := r.Limits[name]; isDomainResource(name) && !ok {
			errs = append(errs, field.Required(p.Child("limits").Key(string(name)),
				fmt.Sprintf("a limit is required for extended resource %s (requested %s)", name, q.String())))
		}
	}
	return errs
}

// isDomainResource reports whether name is domain-qualified outside kubernetes.io: a name a
// pod may mean as a device resource. Validation checks such names against the kubelet's rule
// (checkResourceName) and reports a bad one, where resourcename.IsExtended would only not count it.
func isDomainResource(name v1.ResourceName) bool {
	s := string(name)
	return strings.Contains(s, "/") && !strings.Contains(s, "kubernetes.io/") && !strings.HasPrefix(s, "requests.")
}

// forbidExtended reports every extended resource in list as forbidden.
func forbidExtended(list v1.ResourceList, p *field.Path, why string) field.ErrorList {
	var errs field.ErrorList
	for _, name := range sortedNames(list) {
		if isDomainResource(name) {
			errs = append(errs, field.Forbidden(p.Key(string(name)), why))
		}
	}
	return errs
}

// checkDeviceCount returns why q is not a device count, or "".
func checkDeviceCount(q resource.Quantity) string {
	switch {
	case q.Sign() < 0:
		return "must be a whole, non-negative number of devices"
	case q.Cmp(maxQuantity) > 0:
		return fmt.Sprintf("must be at most %d devices", maxDeviceCount)
	case q.MilliValue()%1000 != 0: // safe: 0 <= q <= 2^31
		return "must be a whole number of devices (no fractions or milli-units)"
	}
	return ""
}

// checkResourceName returns why name is not a valid extended resource name, or "": with the
// "requests." prefix it must be a qualified name, as the API server requires.
func checkResourceName(name v1.ResourceName) string {
	if msgs := validation.IsQualifiedName("requests." + string(name)); len(msgs) > 0 {
		return msgs[0]
	}
	return ""
}

// checkUID returns why uid cannot serve as one path component, or "".
func checkUID(uid string) string {
	switch {
	case uid == "":
		return "must not be empty"
	case len(uid) > maxUIDLength:
		return fmt.Sprintf("must be at most %d bytes", maxUIDLength)
	case uid == "." || uid == "..":
		return `must not be "." or ".."`
	}
	for _, r := range uid {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_') {
			return "must consist of letters, digits, '.', '-' and '_'"
		}
	}
	return ""
}

// shorten keeps values in messages readable: a long value is cut to its first 64 bytes.
func shorten(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	return fmt.Sprintf("%s… (%d bytes)", strings.ToValidUTF8(s[:max], ""), len(s))
}

// sortedNames lists the resource names of list in order, so messages are stable.
func sortedNames(list v1.ResourceList) []v1.ResourceName {
	out := make([]v1.ResourceName, 0, len(list))
	for name := range list {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}
