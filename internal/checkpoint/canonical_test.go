package checkpoint

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestSortedRestoresCanonicalOrder shuffles every order the kubelet leaves
// to map iteration (entries, device lists) in a canonical golden and checks
// Sorted gives the golden bytes back, without touching its input.
func TestSortedRestoresCanonicalOrder(t *testing.T) {
	for _, name := range []string{"2pods-init-app-2res", "numa-2nodes", "churn-gc", "large-100pods-4dev"} {
		t.Run(name, func(t *testing.T) {
			raw := readGolden(t, name)
			d, _, err := Decode(raw)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			shuffled := d.Clone()
			rng.Shuffle(len(shuffled.PodDeviceEntries), func(i, j int) {
				shuffled.PodDeviceEntries[i], shuffled.PodDeviceEntries[j] = shuffled.PodDeviceEntries[j], shuffled.PodDeviceEntries[i]
			})
			for _, e := range shuffled.PodDeviceEntries {
				for _, ids := range e.DeviceIDs {
					rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
				}
			}
			for _, ids := range shuffled.RegisteredDevices {
				rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
			}
			before := shuffled.Clone()
			enc, err := Encode(shuffled.Sorted())
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(enc, raw) {
				t.Errorf("Encode(Sorted) differs from the golden")
			}
			if diff := cmp.Diff(before, shuffled); diff != "" {
				t.Errorf("Sorted modified its input (-before +after):\n%s", diff)
			}
		})
	}
}

// TestCloneKeepsNilAndEmpty checks Clone is deep and keeps nil versus empty,
// so the clone has the same checksum.
func TestCloneKeepsNilAndEmpty(t *testing.T) {
	d := &Data{
		PodDeviceEntries: []PodDevicesEntry{
			{PodUID: "a", DeviceIDs: DevicesPerNUMA{0: nil, 1: {}, 2: {"x"}}, AllocResp: []byte{}},
			{PodUID: "b"},
		},
		RegisteredDevices: map[string][]string{"r": nil, "s": {}},
	}
	c := d.Clone()
	if diff := cmp.Diff(d, c); diff != "" {
		t.Fatalf("(-orig +clone):\n%s", diff)
	}
	if Checksum(c) != Checksum(d) {
		t.Error("checksums differ")
	}
	c.PodDeviceEntries[0].DeviceIDs[2][0] = "changed"
	c.RegisteredDevices["s"] = append(c.RegisteredDevices["s"], "new")
	if d.PodDeviceEntries[0].DeviceIDs[2][0] != "x" || len(d.RegisteredDevices["s"]) != 0 {
		t.Error("Clone shares memory with the original")
	}
	var nilData *Data
	if nilData.Clone() != nil || nilData.Sorted() != nil {
		t.Error("nil Data must clone and sort to nil")
	}
	if (&Data{}).Sorted().PodDeviceEntries != nil {
		t.Error("Sorted turned nil entries into empty")
	}
}

// TestLayoutString pins the layout names used in error messages.
func TestLayoutString(t *testing.T) {
	for l, want := range map[Layout]string{LayoutV2: "V2", LayoutV1: "V1", Layout(7): "Layout(7)"} {
		if got := l.String(); got != want {
			t.Errorf("%d: %q, want %q", int(l), got, want)
		}
	}
}
