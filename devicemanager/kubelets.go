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
	// with the row before it (empty for the first row). The zero Policy is the baseline row's
	// (BaselinePolicyName): an older row turns on switches for what it did differently, a
	// newer one for what it changed.
	Changes string
	// Policy is the kubelet's behaviour: kdm's improvements off, this minor's switches on.
	Policy Policy
}

// kubeletVersions lists the supported kubelet minors, oldest first; the last row is the
// newest, which the alias "kubelet" and `kdm run`'s default select. Nothing else in the
// repository names a minor: the agent's reported version, the test cluster's release, the
// Makefile's and CI's lists and the benchmark tables are derived from these rows
// (TestNoVersionLiteralOutsideTable checks it).
var kubeletVersions = []KubeletVersion{
	{
		Name:      "kubelet-1.35",
		Reference: "v1.35.4",
		Policy: Policy{
			HintsOverEveryNUMANode:    true,
			NoDeviceHealthInPodStatus: true,
		},
	},
	{
		Name:      "kubelet-1.36",
		Reference: "v1.36.3",
		Changes: "topology hints range over the NUMA nodes that hold the resource's devices only; " +
			"device health is reported in pod status (feature gate ResourceHealthStatus on by default)",
		Policy: Policy{},
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

// LookupKubelet returns the row of the kubelet minor a policy name selects ("kubelet-1.37",
// or the alias "kubelet" for the newest), and false for any other name, "kdm" included.
func LookupKubelet(name string) (KubeletVersion, bool) {
	if name == KubeletAlias {
		return NewestKubelet(), true
	}
	for _, v := range kubeletVersions {
		if v.Name == name {
			return v, true
		}
	}
	return KubeletVersion{}, false
}

// NewestKubelet is the newest supported kubelet minor: what the alias "kubelet" and `kdm run`
// select, the release the agent reports as its kubelet version (with a "-kdm" suffix) and the
// release the test cluster's API server is built from.
func NewestKubelet() KubeletVersion { return kubeletVersions[len(kubeletVersions)-1] }

// KubeletAlias is the policy name that selects the newest supported kubelet.
const KubeletAlias = "kubelet"

// KDMPolicyName is the policy name that selects KDMPolicy.
const KDMPolicyName = "kdm"

// DefaultPolicyName is the policy `kdm run` uses when none is named: the newest supported
// kubelet, since that is the release a new node runs. It is not the zero Policy, which stays
// BaselinePolicyName whatever minors are added (see Policy); the scenario runner defaults to
// the baseline and `kdm explore` to kdm, each for the reason its help gives.
func DefaultPolicyName() string { return NewestKubelet().Name }

// BaselinePolicyName is the name of the zero Policy, the kubelet minor every switch is
// measured from (see Policy): the default of the scenario runner, whose stories were recorded
// under it.
func BaselinePolicyName() string { return Policy{}.Name() }

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
// scripts name them: a kubelet row's name gives that kubelet's behaviour (KubeletVersions),
// "kubelet" the newest of them, and "kdm" gives KDMPolicy. Names are matched exactly; any
// other name is an error that lists the valid ones.
func ParsePolicy(name string) (Policy, error) {
	if name == KDMPolicyName {
		return KDMPolicy(), nil
	}
	if v, ok := LookupKubelet(name); ok {
		return v.Policy, nil
	}
	return Policy{}, fmt.Errorf("unknown policy %q: valid policies are %s", name, validPolicies())
}

// validPolicies names the accepted policies for error messages and help texts: every
// kubelet row oldest first, the newest marked as the alias's, then kdm.
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
	return fmt.Sprintf("%s (alias %s) replays that kubelet's device manager; %s adds deferred admission and the other improvements. The default is the newest kubelet, the release a node runs (scenario defaults to the zero Policy's kubelet, explore to kdm)",
		strings.Join(names, " or "), KubeletAlias, KDMPolicyName)
}

// KubeletPolicy is the newest supported kubelet's behaviour: what the alias "kubelet"
// selects. An older minor's is LookupKubelet(name).Policy.
func KubeletPolicy() Policy { return NewestKubelet().Policy }

// Name returns the name of the policy whose switches p has (a kubelet row's, "kdm"), or
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
