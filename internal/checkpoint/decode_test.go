package checkpoint

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestDecodeErrors checks how each kind of unusable input is reported: the
// sentinel to branch on, ErrCorrupt always, and the reason in the text.
func TestDecodeErrors(t *testing.T) {
	cases := []struct {
		name    string
		in      string
		want    error
		msg     string
		checkFn func(t *testing.T, err error)
	}{
		{name: "empty file", in: "", want: ErrNotJSON, msg: "unexpected end of JSON input",
			checkFn: func(t *testing.T, err error) {
				var syn *json.SyntaxError
				if !errors.As(err, &syn) {
					t.Errorf("errors.As(*json.SyntaxError) failed for %v", err)
				}
			}},
		{name: "truncated", in: `{"Data":{"PodDeviceEntries":null,"Regis`, want: ErrNotJSON, msg: "not valid JSON"},
		{name: "trailing garbage", in: specVectors[0].file + "x", want: ErrNotJSON, msg: "invalid character"},
		{name: "top-level array", in: `[]`, want: ErrUnknownLayout, msg: "cannot unmarshal array"},
		{name: "DeviceIDs is a number", in: `{"Data":{"PodDeviceEntries":[{"DeviceIDs":5}]}}`, want: ErrUnknownLayout,
			msg: "neither the V2 nor the V1 layout: json: cannot unmarshal number into Go struct field PodDevicesEntry.Data.PodDeviceEntries.DeviceIDs of type checkpoint.DevicesPerNUMA"},
		{name: "NUMA key not an integer", in: `{"Data":{"PodDeviceEntries":[{"DeviceIDs":{"x":[]}}]}}`, want: ErrUnknownLayout},
		{name: "bad base64", in: `{"Data":{"PodDeviceEntries":[{"AllocResp":"!!"}]}}`, want: ErrUnknownLayout},
		{name: "negative checksum", in: `{"Data":{},"Checksum":-1}`, want: ErrUnknownLayout},
		{name: "missing checksum", in: `{"Data":{"PodDeviceEntries":null,"RegisteredDevices":{}}}`, want: ErrCorrupt,
			msg: "stored 0, computed 3467439661"},
		{name: "checksum above 32 bits", in: `{"Data":{"PodDeviceEntries":null,"RegisteredDevices":{}},"Checksum":7762406957}`,
			want: ErrCorrupt, msg: "stored 7762406957, computed 3467439661"},
		{name: "JSON null", in: `null`, want: ErrCorrupt, checkFn: func(t *testing.T, err error) {
			// Like the kubelet's reader, the entry list and registered
			// devices start as empty values and null leaves them so.
			var ce *ChecksumError
			if !errors.As(err, &ce) || ce.Computed != uint64(Checksum(&Data{PodDeviceEntries: []PodDevicesEntry{}, RegisteredDevices: map[string][]string{}})) {
				t.Errorf("err = %v", err)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, _, err := Decode([]byte(c.in))
			if err == nil {
				t.Fatalf("Decode succeeded: %+v", d)
			}
			if d != nil {
				t.Errorf("Data = %+v, want nil on error", d)
			}
			if !errors.Is(err, c.want) || !errors.Is(err, ErrCorrupt) {
				t.Errorf("err = %v, want errors.Is %v and ErrCorrupt", err, c.want)
			}
			if !strings.Contains(err.Error(), "checkpoint is corrupted") || !strings.Contains(err.Error(), c.msg) {
				t.Errorf("err = %q, want it to contain %q", err, c.msg)
			}
			if c.checkFn != nil {
				c.checkFn(t, err)
			}
		})
	}
}

// TestDecodeLikeKubelet checks the decoder quirks the kubelet's reader has:
// keys match case-insensitively, unknown keys are ignored, and missing
// entries/registered devices read as empty (and are hashed that way).
func TestDecodeLikeKubelet(t *testing.T) {
	cases := []struct {
		name string
		in   string
		want *Data
	}{
		{"lower-case keys", `{"data":{"poddeviceentries":null,"registereddevices":{}},"checksum":3467439661}`,
			&Data{RegisteredDevices: map[string][]string{}}},
		{"unknown keys", `{"Data":{"PodDeviceEntries":null,"RegisteredDevices":{},"AllDevices":{"x":1}},"Checksum":3467439661,"Extra":true}`,
			&Data{RegisteredDevices: map[string][]string{}}},
		{"missing keys read as empty", `{"Data":{},"Checksum":` + uint32String(Checksum(&Data{PodDeviceEntries: []PodDevicesEntry{}, RegisteredDevices: map[string][]string{}})) + `}`,
			&Data{PodDeviceEntries: []PodDevicesEntry{}, RegisteredDevices: map[string][]string{}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, layout, err := Decode([]byte(c.in))
			if err != nil {
				t.Fatal(err)
			}
			if layout != LayoutV2 {
				t.Errorf("layout = %v", layout)
			}
			if diff := cmp.Diff(c.want, d); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func uint32String(v uint32) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestDecodeV1NullDeviceIDs checks a V1 file that also parses as V2 (its only
// entry has null DeviceIDs): the V1 checksum decides, and it is LayoutV1.
func TestDecodeV1NullDeviceIDs(t *testing.T) {
	v1 := &dataV1{PodDeviceEntries: []podDevicesEntryV1{{PodUID: "p", ContainerName: "c", ResourceName: "r"}}}
	b, err := json.Marshal(fileV1{Data: *v1, Checksum: uint64(checksumV1(v1))})
	if err != nil {
		t.Fatal(err)
	}
	d, layout, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if layout != LayoutV1 {
		t.Errorf("layout = %v, want V1", layout)
	}
	want := &Data{PodDeviceEntries: []PodDevicesEntry{{PodUID: "p", ContainerName: "c", ResourceName: "r", DeviceIDs: DevicesPerNUMA{0: nil}}}}
	if diff := cmp.Diff(want, d); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestDecodeUnverified checks the tooling entry point reports layout and
// stored checksum without verifying it.
func TestDecodeUnverified(t *testing.T) {
	d, layout, stored, err := DecodeUnverified(readGolden(t, "corrupt-checksum"))
	if err != nil || layout != LayoutV2 || stored != 2503912198 || len(d.PodDeviceEntries) != 1 {
		t.Errorf("corrupt-checksum: layout %v stored %d err %v", layout, stored, err)
	}
	d, layout, stored, err = DecodeUnverified(readGolden(t, "legacy-v1-shape"))
	if err != nil || layout != LayoutV1 || stored != 0 || d.PodDeviceEntries[0].DeviceIDs[0][0] != "gpu-0" {
		t.Errorf("legacy-v1-shape: layout %v stored %d err %v", layout, stored, err)
	}
	if _, _, _, err := DecodeUnverified([]byte("{")); !errors.Is(err, ErrNotJSON) {
		t.Errorf("err = %v, want ErrNotJSON", err)
	}
}

// FuzzDecode feeds arbitrary bytes to Decode: it must never panic, every
// error must match ErrCorrupt, and whatever decodes must re-encode and decode
// to the same Data.
func FuzzDecode(f *testing.F) {
	for _, v := range specVectors {
		f.Add([]byte(v.file))
	}
	for _, name := range []string{"1pod-1ctr-1dev", "numa-2nodes", "corrupt-checksum", "legacy-v1-shape", "legacy-v1-valid"} {
		f.Add(readGolden(f, name))
	}
	f.Add([]byte(""))
	f.Add([]byte("null"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _, _, _ = DecodeUnverified(b)
		d, _, err := Decode(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error does not match ErrCorrupt: %v", err)
			}
			return
		}
		enc, err := Encode(d)
		if err != nil {
			t.Fatalf("Encode(Decode(b)): %v", err)
		}
		back, layout, err := Decode(enc)
		if err != nil {
			t.Fatalf("Decode(Encode(Decode(b))): %v\n%s", err, enc)
		}
		if layout != LayoutV2 {
			t.Errorf("re-encoded layout = %v", layout)
		}
		if diff := cmp.Diff(d, back); diff != "" {
			t.Fatalf("round trip differs (-first +second):\n%s", diff)
		}
	})
}
