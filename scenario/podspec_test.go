package scenario

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParsePodSpec(t *testing.T) {
	got, err := ParsePodSpec([]string{"init=gpu:2", "sidecar=nic:1", "init=gpu:1", "gpu=1", "app=nic:0"})
	if err != nil {
		t.Fatal(err)
	}
	want := []ContainerSpec{
		{"init-0", InitContainer, "gpu", 2}, {"sidecar-1", SidecarContainer, "nic", 1}, {"init-2", InitContainer, "gpu", 1},
		{"app-0", AppContainer, "gpu", 1}, {"app-1", AppContainer, "nic", 0},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("containers (-want +got):\n%s", diff)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, `a pod needs an app container, got ""`},
		{[]string{"init=gpu:1"}, "a pod needs an app container"},
		{[]string{"gpu"}, `bad pod argument "gpu"`},
		{[]string{"app=gpu"}, `bad container spec "gpu"`},
		{[]string{"app=:1"}, `bad container spec ":1"`},
		{[]string{"gpu=1.5"}, `bad count in "gpu:1.5"`},
		{[]string{"gpu=-2"}, `bad count in "gpu:-2"`},
	} {
		if _, err := ParsePodSpec(tc.args); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.args, err, tc.want)
		}
	}
}

// FuzzParsePodSpec: any arguments give containers that name a resource and a count, with one
// app container at least, or an error; never a panic.
func FuzzParsePodSpec(f *testing.F) {
	for _, s := range []string{"gpu=1", "init=gpu:2 app=gpu:1", "sidecar=nic:1 app=gpu:0", "x", "=:", "app=a:b:c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		specs, err := ParsePodSpec(strings.Fields(s))
		if err != nil {
			return
		}
		apps := 0
		for _, c := range specs {
			if c.Resource == "" || c.Count < 0 || c.Name == "" {
				t.Fatalf("%q gave %+v", s, c)
			}
			if c.Kind == AppContainer {
				apps++
			}
		}
		if apps == 0 {
			t.Fatalf("%q gave no app container: %+v", s, specs)
		}
	})
}
