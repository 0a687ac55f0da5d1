package devicemanager

import (
	"fmt"
	"strings"
)

// KubeletVersion is one kubelet minor whose device manager kdm reproduces: the policy name
// that selects it, the upstream release its behaviour is checked against, and the Policy
// switches that make kdm behave like it.
//
// This table is the one place that lists the supported kubelets. Adding the next minor is
// a new row whose Policy turns on the switches for what that minor changed (new Policy
// fields where it changed something no switch covers yet); docs/adding-a-kubelet-version.md
// says what to compare upstream and which tests to extend.
type KubeletVersion struct {
	// Name is the policy name, "kubelet-1.36": what `kdm run --policy`, the scenario
	// scripts and `kdm explore --policy` take.
	Name string
	// Reference is the upstream release tag the behaviour is checked against, "v1.36.3".
	Reference string
	// Changes says, in one line, what this minor changed in the device manager compared
	// with the row before it (empty for the first row).
	Changes string
	// Policy is the kubelet's behaviour: kdm's improvements off, this minor's switches on.
	Policy Policy
}

// kubeletVersions lists the supported kubelet minors, oldest first; the last row is the
// newest, which the alias "kubelet" and `kdm run`'s default select.
var kubeletVersions = []KubeletVersion{
	{
		Name:      "kubelet-1.36",
		Reference: "v1.36.3",
		Policy:    Policy{},
	},
	{
		Name:      "kubelet-1.37",
		Reference: "v1.37.2",
		Changes: "endpoints tracked per resource and socket: a Register on a connected socket is refused, " +
			"a remaining instance takes over when one disconnects, a plugins_registry removal stops only its own instance; " +
			"an in-place resize no longer runs the device allocation",
		Policy: Policy{
			RejectSameSocketRegistration: true,
			PromoteLiveInstance:          true,
			SkipAllocationOnResize:       true,
		},
	},
}

// KubeletVersions returns the supported kubelet minors, oldest first.
func KubeletVersions() []KubeletVersion {
	return append([]KubeletVersion(nil), kubeletVersions...)
}

// newestKubelet is the newest supported kubelet minor.
func newestKubelet() KubeletVersion { return kubeletVersions[len(kubeletVersions)-1] }

// KubeletAlias is the policy name that selects the newest supported kubelet.
const KubeletAlias = "kubelet"

// KDMPolicyName is the policy name that selects KDMPolicy.
const KDMPolicyName = "kdm"

// DefaultPolicyName is the policy `kdm run` and the scenario runner use when none is named:
// the newest supported kubelet, since that is the release a new user runs.
func DefaultPolicyName() string { return newestKubelet().Name }

// PolicyNames returns every policy name ParsePolicy accepts except the alias: each kubelet
// minor, oldest first, then "kdm". Tools that show one column per policy use this order.
func PolicyNames() []string {
	names := make([]string, 0, len(kubeletVersions)+1)
	for _, v := range kubeletVersions {
		names = append(names, v.Name)
	}
	return append(names, KDMPolicyName)
}

// ParsePolicy returns the policy a name selects, as `kdm run --policy` and the scenario
// scripts name them: "kubelet-1.36" and "kubelet-1.37" give that kubelet's behaviour
// (KubeletVersions), "kubelet" the newest of them, and "kdm" gives KDMPolicy. Names are
// matched exactly; any other name is an error that lists the valid ones.
func ParsePolicy(name string) (Policy, error) {
	if name == KDMPolicyName {
		return KDMPolicy(), nil
	}
	if name == KubeletAlias {
		return newestKubelet().Policy, nil
	}
	for _, v := range kubeletVersions {
		if v.Name == name {
			return v.Policy, nil
		}
	}
	return Policy{}, fmt.Errorf("unknown policy %q: valid policies are %s", name, validPolicies())
}

// validPolicies names the accepted policies for error messages and help texts:
// "kubelet-1.36, kubelet-1.37 (alias kubelet) and kdm".
func validPolicies() string {
	names := make([]string, 0, len(kubeletVersions)+1)
	for _, v := range kubeletVersions {
		names = append(names, v.Name)
	}
	names[len(names)-1] += " (alias " + KubeletAlias + ")"
	return strings.Join(names, ", ") + " and " + KDMPolicyName
}

// PolicyHelp is a one-line description of the policies for command-line help.
func PolicyHelp() string {
	names := make([]string, 0, len(kubeletVersions))
	for _, v := range kubeletVersions {
		names = append(names, v.Name)
	}
	return fmt.Sprintf("%s (alias %s) replays that kubelet's device manager; %s adds deferred admission and the other improvements. The default is the newest kubelet",
		strings.Join(names, " or "), KubeletAlias, KDMPolicyName)
}

// Kubelet136Policy is the kubelet v1.36 behaviour: the zero Policy, every switch off.
func Kubelet136Policy() Policy { return kubeletVersions[0].Policy }

// Kubelet137Policy is the kubelet v1.37 behaviour: Kubelet136Policy plus
// RejectSameSocketRegistration, PromoteLiveInstance and SkipAllocationOnResize.
func Kubelet137Policy() Policy { return kubeletVersions[1].Policy }

// KubeletPolicy is the newest supported kubelet's behaviour (today Kubelet137Policy): what
// the alias "kubelet" selects.
func KubeletPolicy() Policy { return newestKubelet().Policy }

// Name returns the name of the policy whose switches p has ("kubelet-1.37", "kdm"), or
// "custom" when no named policy has them. Durations are not compared: a named policy with
// other deadlines (`kdm run --allocate-timeout`, `--defer-admission-timeout`) keeps its name.
func (p Policy) Name() string {
	if p.switches() == KDMPolicy().switches() {
		return KDMPolicyName
	}
	for _, v := range kubeletVersions {
		if v.Policy.switches() == p.switches() {
			return v.Name
		}
	}
	return "custom"
}

// switches returns p with its durations zeroed: what makes it one policy or another.
func (p Policy) switches() Policy {
	p.DeferAdmissionTimeout, p.AllocateTimeout, p.PreferredAllocationTimeout = 0, 0, 0
	return p
}

// IsKubelet reports whether p is one of the supported kubelets' behaviours exactly, with
// none of kdm's improvements.
func (p Policy) IsKubelet() bool {
	for _, v := range kubeletVersions {
		if v.Policy == p {
			return true
		}
	}
	return false
}
