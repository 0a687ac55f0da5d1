package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/kdm-project/kdm/devicemanager"
)

// TestRunRefusesBadPolicyFlags: `kdm run` exits 2 before starting anything when --policy names
// no policy (the message lists the valid ones, from devicemanager.ParsePolicy) or when
// --allocate-timeout is negative.
func TestRunRefusesBadPolicyFlags(t *testing.T) {
	_, unknown := devicemanager.ParsePolicy("nope")
	if unknown == nil || !strings.HasPrefix(unknown.Error(), `unknown policy "nope": valid policies are `) {
		t.Fatalf("ParsePolicy(nope) = %v", unknown)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--policy", "nope"}, "--policy: " + unknown.Error()},
		{[]string{"--policy", "kdm", "--allocate-timeout", "-1s"}, "--allocate-timeout must not be negative: -1s"},
	} {
		dir := t.TempDir()
		args := append([]string{"run", "--root-dir", dir, "--device-plugin-dir", dir, "--healthz-bind-address", ""}, tc.args...)
		var out, errOut bytes.Buffer
		if code := run(args, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("kdm %s: exit %d, stderr %q; want exit 2 saying %q", strings.Join(args, " "), code, errOut.String(), tc.want)
		}
	}
}
