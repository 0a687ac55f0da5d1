package upstreambench

import (
	"bytes"
	"encoding/json"
	"os"
	"strconv"
	"testing"

	"github.com/kdm-project/kdm/checkpoint"
	"github.com/kdm-project/kdm/test/upstreambench/suite"
)

// TestFloorLayout checks that the floors overwrite the parts of the checkpoint their rows
// change: layoutOf finds every entry in the file's order, the checksum's digits and each
// registered device, in files of the Allocate, AllocateBeside and ListAndWatchUpdate rows'
// shapes.
func TestFloorLayout(t *testing.T) {
	beside := kdmData(suite.CheckpointData(t, 1, 1, 1, false))
	beside.RegisteredDevices[suite.LargeResource] = kdmData(suite.CheckpointData(t, 0, 0, 50, false)).RegisteredDevices[suite.ResourceName]
	for name, d := range map[string]*checkpoint.Data{
		"allocate,pods=0":   kdmData(suite.CheckpointData(t, 1, 1, 1, false)),
		"allocate,pods=100": kdmData(suite.CheckpointData(t, 101, 1, 101, false)),
		"beside":            beside,
		"listandwatch":      kdmData(suite.CheckpointData(t, 1, 1, 1000, false)),
		"numa":              kdmData(suite.CheckpointData(t, 10, 4, 40, true)),
	} {
		t.Run(name, func(t *testing.T) {
			enc := encode(t, d)
			l, err := layoutOf(enc)
			if err != nil {
				t.Fatal(err)
			}
			if len(l.entries) != len(d.PodDeviceEntries) {
				t.Fatalf("%d entries found, want %d", len(l.entries), len(d.PodDeviceEntries))
			}
			for i, s := range l.entries {
				var e checkpoint.PodDevicesEntry
				if err := json.Unmarshal(enc[s.off:s.end], &e); err != nil {
					t.Fatalf("entry %d at %d..%d: %v: %q", i, s.off, s.end, err, enc[s.off:s.end])
				}
				if e.PodUID != d.PodDeviceEntries[i].PodUID {
					t.Errorf("entry %d is pod %s's, want %s's", i, e.PodUID, d.PodDeviceEntries[i].PodUID)
				}
			}
			if got, want := string(enc[l.checksum.off:l.checksum.end]), strconv.FormatUint(uint64(checkpoint.Checksum(d)), 10); got != want {
				t.Errorf("checksum digits %q, want %q", got, want)
			}
			for res, ids := range d.RegisteredDevices {
				for _, id := range ids {
					s, err := l.device(enc, id)
					if err != nil {
						t.Fatalf("%s: %v", res, err)
					}
					if s.off < l.entries[len(l.entries)-1].end || string(enc[s.off:s.end]) != strconv.Quote(id) {
						t.Fatalf("%s: device %s found at %d..%d: %q", res, id, s.off, s.end, enc[s.off:s.end])
					}
				}
			}
			if _, err := l.device(enc, suite.DeviceID(1<<20)); err == nil {
				t.Error("an unregistered device was found")
			}
		})
	}
}

// TestInPlaceWrite checks the floors' file work: after writes of some spans, with and without
// the directory's fsync, the file at the name holds the checkpoint's bytes, which decode with
// a valid checksum, and the spare is another file.
func TestInPlaceWrite(t *testing.T) {
	d := kdmData(suite.CheckpointData(t, 3, 1, 3, false))
	enc := encode(t, d)
	l := mustLayout(t, enc)
	dir := t.TempDir()
	w := newInPlace(t, dir, enc)
	for i, dirSync := range []bool{true, false, true} {
		if err := w.write(dirSync, l.entries[i], l.checksum); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(w.path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, enc) {
			t.Fatalf("write %d: the file differs from the checkpoint", i)
		}
		if _, _, err := checkpoint.Decode(got); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		a, errA := os.Stat(w.path)
		s, errS := os.Stat(w.spare)
		if errA != nil || errS != nil || os.SameFile(a, s) {
			t.Fatalf("write %d: the file and the spare: %v, %v, same file %v", i, errA, errS, os.SameFile(a, s))
		}
	}
}
