package checkpoint_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/kdm-project/kdm/checkpoint"
)

func sample() *checkpoint.Data {
	return &checkpoint.Data{
		PodDeviceEntries: []checkpoint.PodDevicesEntry{{
			PodUID: "pod-a", ContainerName: "ctr", ResourceName: "example.com/gpu",
			DeviceIDs: checkpoint.DevicesPerNUMA{0: {"dev-0", "dev-1"}},
			AllocResp: []byte{0x0a, 0x01},
		}},
		RegisteredDevices: map[string][]string{"example.com/gpu": {"dev-0", "dev-1", "dev-2"}},
	}
}

// The public Store writes what Encode encodes and reads it back, in both write modes.
func TestStoreRoundTrip(t *testing.T) {
	for _, plain := range []bool{false, true} {
		dir := t.TempDir()
		s, err := checkpoint.NewStore(checkpoint.StoreConfig{Dir: dir, PlainWrites: plain})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.Read(); !errors.Is(err, checkpoint.ErrNotFound) {
			t.Fatalf("PlainWrites=%v: Read of a missing file = %v, want ErrNotFound", plain, err)
		}
		want := sample()
		for range 3 { // the second and third writes go through the spare unless plain
			if err := s.Write(want); err != nil {
				t.Fatal(err)
			}
		}
		got, layout, err := s.Read()
		if err != nil || layout != checkpoint.LayoutV2 || !reflect.DeepEqual(got, want) {
			t.Fatalf("PlainWrites=%v: Read = %+v, %v, %v; want %+v, V2, nil", plain, got, layout, err, want)
		}
		enc, err := checkpoint.Encode(want)
		if err != nil {
			t.Fatal(err)
		}
		file, err := checkpoint.ReadFile(s.Path())
		if err != nil || !bytes.Equal(file, enc) {
			t.Fatalf("PlainWrites=%v: file = %s, %v; want Encode's %s", plain, file, err, enc)
		}
		if _, err := os.Stat(filepath.Join(dir, checkpoint.SpareFileName)); plain != errors.Is(err, os.ErrNotExist) {
			t.Errorf("PlainWrites=%v: spare file: %v", plain, err)
		}
		if err := s.Remove(); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// A corrupt file is quarantined, and the error matches the package's error values and types.
func TestStoreQuarantine(t *testing.T) {
	dir := t.TempDir()
	b, err := checkpoint.Encode(sample())
	if err != nil {
		t.Fatal(err)
	}
	b = bytes.Replace(b, []byte("dev-2"), []byte("dev-3"), 1) // the checksum no longer matches
	if err := os.WriteFile(filepath.Join(dir, checkpoint.FileName), b, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := checkpoint.NewStore(checkpoint.StoreConfig{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = s.Read()
	var q *checkpoint.QuarantineError
	var sum *checkpoint.ChecksumError
	if !errors.Is(err, checkpoint.ErrCorrupt) || !errors.As(err, &q) || !errors.As(err, &sum) {
		t.Fatalf("Read = %v, want a *QuarantineError for a *ChecksumError", err)
	}
	if _, err := os.Stat(q.QuarantinedAs); err != nil {
		t.Errorf("quarantined file: %v", err)
	}
	if _, _, err := checkpoint.Decode(b); !errors.As(err, &sum) {
		t.Errorf("Decode = %v, want a *ChecksumError", err)
	}
}

func TestStoreConfigValidate(t *testing.T) {
	if err := (checkpoint.StoreConfig{Dir: "relative"}).Validate(); err == nil {
		t.Error("Validate accepted a relative Dir")
	}
	if _, err := checkpoint.NewStore(checkpoint.StoreConfig{}); err == nil {
		t.Error("NewStore accepted an empty Dir")
	}
}
