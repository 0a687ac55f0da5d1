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
		{name: "kubelet-1.36", want: KubeletPolicy()},
		{name: "kubelet", want: KubeletPolicy()},
		{name: "kdm", want: KDMPolicy()},
		{name: "", wantErr: `unknown policy "": valid policies are kubelet-1.36 (alias kubelet) and kdm`},
		{name: "KDM", wantErr: `unknown policy "KDM": valid policies are kubelet-1.36 (alias kubelet) and kdm`},
		{name: "kubelet-1.35", wantErr: `unknown policy "kubelet-1.35": valid policies are kubelet-1.36 (alias kubelet) and kdm`},
		{name: " kdm", wantErr: `unknown policy " kdm": valid policies are kubelet-1.36 (alias kubelet) and kdm`},
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
// applies, the kubelet policy carries none, and a deadline set on Config.Endpoint wins over the
// policy's.
func TestPolicyRPCDeadlines(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		policy               Policy
		endpoint             endpoint.Config
		wantAlloc, wantPrefd time.Duration
	}{
		{name: "kubelet", policy: KubeletPolicy()},
		{name: "kdm", policy: KDMPolicy(),
			wantAlloc: endpoint.RecommendedAllocateTimeout, wantPrefd: endpoint.RecommendedPreferredAllocationTimeout},
		{name: "kdm, endpoint set", policy: KDMPolicy(),
			endpoint:  endpoint.Config{AllocateTimeout: 3 * time.Second, PreferredAllocationTimeout: time.Second},
			wantAlloc: 3 * time.Second, wantPrefd: time.Second},
		{name: "kdm, one endpoint deadline set", policy: KDMPolicy(),
			endpoint:  endpoint.Config{PreferredAllocationTimeout: time.Second},
			wantAlloc: endpoint.RecommendedAllocateTimeout, wantPrefd: time.Second},
		{name: "kubelet, endpoint set", policy: KubeletPolicy(),
			endpoint:  endpoint.Config{AllocateTimeout: 3 * time.Second},
			wantAlloc: 3 * time.Second},
		{name: "custom policy", policy: Policy{AllocateTimeout: 7 * time.Second},
			wantAlloc: 7 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Config{Policy: tc.policy, Endpoint: tc.endpoint}.withDefaults()
			if c.Endpoint.AllocateTimeout != tc.wantAlloc || c.Endpoint.PreferredAllocationTimeout != tc.wantPrefd {
				t.Errorf("endpoint deadlines Allocate %v, GetPreferredAllocation %v; want %v, %v",
					c.Endpoint.AllocateTimeout, c.Endpoint.PreferredAllocationTimeout, tc.wantAlloc, tc.wantPrefd)
			}
		})
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
