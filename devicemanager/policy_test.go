package devicemanager

import (
	"strings"
	"testing"
	"time"

	"github.com/kdm-project/kdm/endpoint"
)

// TestParsePolicy: every accepted name gives the policy of its constructor, and any other name
// is refused with an error that quotes it and lists the valid names.
func TestParsePolicy(t *testing.T) {
	for _, tc := range []struct {
		name    string
		want    Policy
		wantErr string
	}{
		{name: "kubelet-1.36", want: Policy{}},
		{name: "kubelet-1.37", want: Policy{RejectSameSocketRegistration: true, PromoteLiveInstance: true, SkipAllocationOnResize: true}},
		{name: "kubelet", want: KubeletPolicy()},
		{name: "kdm", want: KDMPolicy()},
		{name: "", wantErr: `unknown policy "": valid policies are ` + validPolicies()},
		{name: "KDM", wantErr: `unknown policy "KDM": valid policies are ` + validPolicies()},
		{name: "kubelet-1.0", wantErr: `unknown policy "kubelet-1.0": valid policies are ` + validPolicies()},
		{name: " kdm", wantErr: `unknown policy " kdm": valid policies are ` + validPolicies()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParsePolicy(tc.name)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("ParsePolicy(%q) error = %v, want %q", tc.name, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParsePolicy(%q): %v", tc.name, err)
			}
			if got != tc.want {
				t.Errorf("ParsePolicy(%q) = %+v, want %+v", tc.name, got, tc.want)
			}
		})
	}
}

// TestPolicyRPCDeadlines: KDMPolicy carries the plugin RPC deadlines that `kdm run --policy kdm`
// applies, the kubelet policies carry none, a custom policy's are used as given, and the
// endpoints get exactly the policy's: it is the one place they are set.
func TestPolicyRPCDeadlines(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		policy               Policy
		wantAlloc, wantPrefd time.Duration
	}{
		{name: "kubelet-1.36", policy: rowPolicy(t, "kubelet-1.36")},
		{name: "kubelet-1.37", policy: rowPolicy(t, "kubelet-1.37")},
		{name: "kdm", policy: KDMPolicy(),
			wantAlloc: endpoint.RecommendedAllocateTimeout, wantPrefd: endpoint.RecommendedPreferredAllocationTimeout},
		{name: "custom policy", policy: Policy{AllocateTimeout: 7 * time.Second, PreferredAllocationTimeout: time.Second},
			wantAlloc: 7 * time.Second, wantPrefd: time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Policy: tc.policy}
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			c := cfg.withDefaults()
			if c.Endpoint.AllocateTimeout != tc.wantAlloc || c.Endpoint.PreferredAllocationTimeout != tc.wantPrefd {
				t.Errorf("endpoint deadlines Allocate %v, GetPreferredAllocation %v; want %v, %v",
					c.Endpoint.AllocateTimeout, c.Endpoint.PreferredAllocationTimeout, tc.wantAlloc, tc.wantPrefd)
			}
		})
	}
	if err := (Config{Policy: KDMPolicy(), Endpoint: endpoint.Config{AllocateTimeout: time.Second}}).Validate(); err == nil {
		t.Errorf("a deadline on Config.Endpoint was accepted beside the policy's")
	}
}

// TestPolicyValidate: negative policy durations are refused, each with a message naming it.
func TestPolicyValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy Policy
		want   []string
	}{
		{name: "kdm", policy: KDMPolicy()},
		{name: "kubelet", policy: KubeletPolicy()},
		{name: "negative allocate", policy: Policy{AllocateTimeout: -time.Second},
			want: []string{"allocate timeout must not be negative: -1s"}},
		{name: "negative preferred", policy: Policy{PreferredAllocationTimeout: -time.Second},
			want: []string{"preferred allocation timeout must not be negative: -1s"}},
		{name: "all negative", policy: Policy{DeferAdmissionTimeout: -1, AllocateTimeout: -2, PreferredAllocationTimeout: -3},
			want: []string{"defer admission timeout must not be negative: -1ns",
				"allocate timeout must not be negative: -2ns",
				"preferred allocation timeout must not be negative: -3ns"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Config{Policy: tc.policy}.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate accepted %+v", tc.policy)
			}
			if got := strings.Split(err.Error(), "\n"); strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Errorf("Validate errors %q, want %q", got, tc.want)
			}
		})
	}
}

// TestKubeletVersions: every kubelet row's name parses back to its policy and is named by it;
// the rows are distinct, none has kdm's improvements, and the alias and the default are the
// newest row.
func TestKubeletVersions(t *testing.T) {
	versions := KubeletVersions()
	if len(versions) < 2 {
		t.Fatalf("%d kubelet versions, want at least 1.36 and 1.37", len(versions))
	}
	seen := map[Policy]string{}
	for _, v := range versions {
		p, err := ParsePolicy(v.Name)
		if err != nil || p != v.Policy {
			t.Errorf("ParsePolicy(%q) = %+v, %v; want the row's policy", v.Name, p, err)
		}
		if got := v.Policy.Name(); got != v.Name {
			t.Errorf("%s: Policy.Name() = %q", v.Name, got)
		}
		if !v.Policy.IsKubelet() {
			t.Errorf("%s: IsKubelet() = false", v.Name)
		}
		if other, dup := seen[v.Policy]; dup {
			t.Errorf("%s has the same switches as %s", v.Name, other)
		}
		seen[v.Policy] = v.Name
		if v.Policy.DeferAdmission || v.Policy.KeepCompletedInitDevices || v.Policy.PreferredAllocationFallback ||
			v.Policy.CoalesceDeviceListWrites || v.Policy.DropRemovedResources || v.Policy.ReadLegacyCheckpoint || v.Policy.KeepRecordedDevices ||
			v.Policy.AllocateTimeout != 0 || v.Policy.PreferredAllocationTimeout != 0 {
			t.Errorf("%s turns on an improvement no kubelet has: %+v", v.Name, v.Policy)
		}
	}
	newest := versions[len(versions)-1]
	if alias, _ := ParsePolicy("kubelet"); alias != newest.Policy || KubeletPolicy() != newest.Policy || DefaultPolicyName() != newest.Name {
		t.Errorf("the alias, KubeletPolicy or the default is not the newest kubelet %s", newest.Name)
	}
	if KDMPolicy().Name() != "kdm" || KDMPolicy().IsKubelet() || (Policy{DeferAdmission: true}).Name() != "custom" {
		t.Errorf("kdm or a custom policy misnamed")
	}
	withDeadlines := KDMPolicy()
	withDeadlines.AllocateTimeout, withDeadlines.DeferAdmissionTimeout = time.Minute, time.Hour
	timedKubelet := Policy{AllocateTimeout: time.Second}
	if withDeadlines.Name() != "kdm" || timedKubelet.Name() != BaselinePolicyName() {
		t.Errorf("a named policy with other deadlines is named %q and %q, want kdm and %s", withDeadlines.Name(), timedKubelet.Name(), BaselinePolicyName())
	}
	want := []string{}
	for _, v := range versions {
		want = append(want, v.Name)
	}
	if got, want := PolicyNames(), append(want, "kdm"); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("PolicyNames() = %v, want %v", got, want)
	}
	if base, ok := LookupKubelet(BaselinePolicyName()); !ok || base.Policy != (Policy{}) {
		t.Errorf("the baseline %q is not a kubelet row with the zero Policy", BaselinePolicyName())
	}
	if _, ok := LookupKubelet(KDMPolicyName); ok {
		t.Errorf("LookupKubelet(%q) found a kubelet row", KDMPolicyName)
	}
	if v, ok := LookupKubelet(KubeletAlias); !ok || v != newest {
		t.Errorf("LookupKubelet(%q) = %+v, %v; want the newest row", KubeletAlias, v, ok)
	}
}

// TestValidPoliciesListsEveryRow: the error text and help list every kubelet row, oldest
// first, the newest as the alias's, then kdm.
func TestValidPoliciesListsEveryRow(t *testing.T) {
	var parts []string
	for _, v := range KubeletVersions() {
		parts = append(parts, v.Name)
	}
	parts[len(parts)-1] += " (alias kubelet)"
	if got, want := validPolicies(), strings.Join(parts, ", ")+" and kdm"; got != want {
		t.Errorf("validPolicies() = %q, want %q", got, want)
	}
}

// rowPolicy is the Policy of the kubelet row named name; the test fails if there is none.
func rowPolicy(t testing.TB, name string) Policy {
	t.Helper()
	v, ok := LookupKubelet(name)
	if !ok {
		t.Fatalf("no kubelet row named %q", name)
	}
	return v.Policy
}
