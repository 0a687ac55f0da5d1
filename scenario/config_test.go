package scenario

import (
	"strings"
	"testing"

	"github.com/go-logr/logr/testr"

	"github.com/kdm-project/kdm/devicemanager"
)

// TestConfigValidate covers every rejection of Config.Validate with its message, and checks
// that New refuses the same configs with the same error.
func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string // "" for a valid config
	}{
		{"zero", Config{}, ""},
		{"kubelet-1.36", Config{Policy: "kubelet-1.36", ScriptDir: "testdata"}, ""},
		{"kubelet alias", Config{Policy: "kubelet"}, ""},
		{"kdm", Config{Policy: "kdm", Logger: testr.New(t)}, ""},
		{"unknown policy", Config{Policy: "nope"},
			`scenario: unknown policy "nope": valid policies are ` + validPolicies()},
		{"policy names match exactly", Config{Policy: "KDM"},
			`scenario: unknown policy "KDM": valid policies are ` + validPolicies()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			r, nerr := New(tc.cfg)
			if r != nil {
				defer r.Close()
			}
			if tc.want == "" {
				if err != nil || nerr != nil {
					t.Fatalf("Validate() = %v, New() = %v; want both nil", err, nerr)
				}
				return
			}
			if err == nil || err.Error() != tc.want {
				t.Fatalf("Validate() = %v, want %q", err, tc.want)
			}
			if nerr == nil || nerr.Error() != tc.want {
				t.Errorf("New() = %v, %v; want error %q", r, nerr, tc.want)
			}
		})
	}
}

// TestConfigZeroValues checks what the zero fields mean: the kubelet's policy, with its
// quarantine off, and a runner that resolves files against the working directory.
func TestConfigZeroValues(t *testing.T) {
	r, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.policy != (devicemanager.Policy{}) || r.quarantine {
		t.Errorf("zero Policy: got %+v (quarantine %v), want the kubelet's policy without quarantine", r.policy, r.quarantine)
	}
	if r.scriptDir != "" || r.log.GetSink() == nil {
		t.Errorf("zero ScriptDir/Logger: scriptDir %q, logger sink %v; want \"\" and a discarding sink", r.scriptDir, r.log.GetSink())
	}

	k, err := New(Config{Policy: "kdm", ScriptDir: "scripts"})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	if !k.quarantine || !k.policy.DeferAdmission || k.policy.CoalesceDeviceListWrites || k.scriptDir != "scripts" {
		t.Errorf("kdm runner: policy %+v, quarantine %v, scriptDir %q", k.policy, k.quarantine, k.scriptDir)
	}
}

// validPolicies is the list ParsePolicy's error gives, derived from the table: every kubelet
// minor oldest first, the newest as the alias's, then kdm.
func validPolicies() string {
	var names []string
	for _, v := range devicemanager.KubeletVersions() {
		names = append(names, v.Name)
	}
	names[len(names)-1] += " (alias " + devicemanager.KubeletAlias + ")"
	return strings.Join(names, ", ") + " and " + devicemanager.KDMPolicyName
}
