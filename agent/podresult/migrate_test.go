package podresult

import (
	"os"
	"path/filepath"
	"testing"

	"k8s.io/klog/v2/ktesting"
)

// TestResultsMoveKeepsTheOnlyCopy: when the results directory already has something at an old
// result's name, the old copy is removed only if that something is a regular file holding
// the same pod's result. A planted symbolic link (even one to the old copy itself), a
// directory, a file that is no result or another pod's result is left alone, and so is the
// old copy, which may be the pod's only one.
func TestResultsMoveKeepsTheOnlyCopy(t *testing.T) {
	const (
		name   = "default_old_uid-old.json"
		result = `{"namespace":"default","name":"old","uid":"uid-old","phase":"Rejected"}`
	)
	for _, tc := range []struct {
		name     string
		plant    func(legacy, dest string) error
		keepsOld bool
	}{
		{"symlink to the old copy", func(legacy, dest string) error { return os.Symlink(filepath.Join(legacy, name), dest) }, true},
		{"symlink to nowhere", func(_, dest string) error { return os.Symlink("/nonexistent/result.json", dest) }, true},
		{"directory", func(_, dest string) error { return os.Mkdir(dest, 0o750) }, true},
		{"not a result", func(_, dest string) error { return os.WriteFile(dest, []byte("{not kdm's"), 0o600) }, true},
		{"another pod's result", func(_, dest string) error {
			return os.WriteFile(dest, []byte(`{"namespace":"default","name":"old","uid":"uid-other","phase":"Admitted"}`), 0o600)
		}, true},
		{"the same pod's result", func(_, dest string) error { return os.WriteFile(dest, []byte(result), 0o600) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			legacy, dir := filepath.Join(root, "pods"), filepath.Join(root, "kdm", "pods")
			if err := os.MkdirAll(legacy, 0o750); err != nil {
				t.Fatal(err)
			}
			from := filepath.Join(legacy, name)
			if err := os.WriteFile(from, []byte(result), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(dir, 0o750); err != nil {
				t.Fatal(err)
			}
			dest := filepath.Join(dir, name)
			if err := tc.plant(legacy, dest); err != nil {
				t.Fatal(err)
			}
			planted, err := os.Lstat(dest)
			if err != nil {
				t.Fatal(err)
			}

			Migrate(ktesting.NewLogger(t, ktesting.NewConfig()), legacy, dir)

			data, err := os.ReadFile(from)
			switch {
			case tc.keepsOld && (err != nil || string(data) != result):
				t.Fatalf("old copy after the move: %q, %v; want it kept, unchanged", data, err)
			case !tc.keepsOld && !os.IsNotExist(err):
				t.Fatalf("old copy beside the same pod's result: %v, want it removed", err)
			}
			if now, err := os.Lstat(dest); err != nil || !os.SameFile(planted, now) {
				t.Fatalf("what was at the destination was removed or replaced (stat: %v)", err)
			}
		})
	}
}
