package checkpoint

import (
	"os"
	"path/filepath"
	"testing"

	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
)

// TestStoreConfigValidate lists every value StoreConfig.Validate refuses,
// with its message, and checks that NewStore refuses it too without touching
// the disk.
func TestStoreConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  StoreConfig
		want string
	}{
		{"empty Dir", StoreConfig{}, "checkpoint store: Dir must be set"},
		{"relative Dir", StoreConfig{Dir: "device-plugins"},
			`checkpoint store: Dir must be an absolute path, got "device-plugins"`},
		{"dot Dir", StoreConfig{Dir: ".", OverwriteCorrupt: true},
			`checkpoint store: Dir must be an absolute path, got "."`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if err == nil || err.Error() != tc.want {
				t.Fatalf("Validate() = %v, want %q", err, tc.want)
			}
			s, err := NewStore(tc.cfg)
			if err == nil || err.Error() != tc.want {
				t.Errorf("NewStore() = %v, %v; want error %q", s, err, tc.want)
			}
		})
	}
	if _, err := os.Stat("device-plugins"); !os.IsNotExist(err) {
		t.Errorf("NewStore created a relative directory: %v", err)
	}
}

// TestStoreConfigZeroValues checks what each zero field means, and that set
// fields are used as given.
func TestStoreConfigZeroValues(t *testing.T) {
	dir := t.TempDir()
	if err := (StoreConfig{Dir: dir}).Validate(); err != nil {
		t.Fatalf("Validate() of a config with only Dir = %v", err)
	}
	s := newTestStore(t, StoreConfig{Dir: dir + string(filepath.Separator)})
	if s.Path() != filepath.Join(dir, FileName) {
		t.Errorf("Path = %s, want %s", s.Path(), filepath.Join(dir, FileName))
	}
	if !s.quarantine {
		t.Error("zero OverwriteCorrupt: quarantine off, want on")
	}
	if _, ok := s.clock.(clock.RealClock); !ok {
		t.Errorf("nil Clock: got %T, want clock.RealClock", s.clock)
	}
	if s.logger.GetSink() != nil {
		t.Error("zero Logger: got a sink, want the discarding zero Logger")
	}

	fake := clocktesting.NewFakePassiveClock(s.clock.Now())
	s = newTestStore(t, StoreConfig{Dir: dir, OverwriteCorrupt: true, Clock: fake})
	if s.quarantine {
		t.Error("OverwriteCorrupt: quarantine on, want off")
	}
	if s.clock != fake {
		t.Errorf("Clock = %v, want the fake clock", s.clock)
	}
}
