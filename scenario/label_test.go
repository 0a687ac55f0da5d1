package scenario

import "testing"

// TestGroupLabel: runs of consecutive kubelet minors are named by the run, so that a minor
// added beside a run that behaves alike keeps every label; kdm follows by name.
func TestGroupLabel(t *testing.T) {
	policies := []string{"kubelet-1.1", "kubelet-1.2", "kubelet-1.3", "kubelet-1.4", "kdm"}
	for _, tc := range []struct {
		members []string
		want    string
	}{
		{[]string{"kubelet-1.1", "kubelet-1.2", "kubelet-1.3", "kubelet-1.4"}, "kubelets"},
		{[]string{"kubelet-1.1", "kubelet-1.2", "kubelet-1.3", "kubelet-1.4", "kdm"}, "kubelets, kdm"},
		{[]string{"kubelet-1.1", "kubelet-1.2"}, "kubelet <=1.2"},
		{[]string{"kubelet-1.1"}, "kubelet <=1.1"},
		{[]string{"kubelet-1.4", "kdm"}, "kubelet >=1.4, kdm"},
		{[]string{"kubelet-1.3", "kubelet-1.4"}, "kubelet >=1.3"},
		{[]string{"kubelet-1.2", "kubelet-1.3"}, "kubelet 1.2..1.3"},
		{[]string{"kubelet-1.2"}, "kubelet-1.2"},
		{[]string{"kubelet-1.1", "kubelet-1.3"}, "kubelet-1.1, kubelet-1.3"},
		{[]string{"kdm"}, "kdm"},
	} {
		if got := groupLabel(policies, tc.members); got != tc.want {
			t.Errorf("groupLabel(%q) = %q, want %q", tc.members, got, tc.want)
		}
	}
}
