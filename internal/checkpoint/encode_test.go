package checkpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

// allValidUTF8 reports whether every string in d is valid UTF-8.
func allValidUTF8(d *Data) bool {
	ok := func(l []string) bool {
		for _, s := range l {
			if !utf8.ValidString(s) {
				return false
			}
		}
		return true
	}
	for _, e := range d.PodDeviceEntries {
		if !ok([]string{e.PodUID, e.ContainerName, e.ResourceName}) {
			return false
		}
		for _, ids := range e.DeviceIDs {
			if !ok(ids) {
				return false
			}
		}
	}
	for k, ids := range d.RegisteredDevices {
		if !ok([]string{k}) || !ok(ids) {
			return false
		}
	}
	return true
}

// FuzzEncode proves Encode byte-identical to encoding/json over mirror
// structs (the kubelet's way), and that Decode gives back exactly the same
// Data, nil and empty values included.
func FuzzEncode(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		d := fuzzData(b)
		got, err := Encode(d)
		if !allValidUTF8(d) {
			if !errors.Is(err, ErrInvalidUTF8) {
				t.Fatalf("Encode of invalid UTF-8: err = %v, want ErrInvalidUTF8", err)
			}
			return
		}
		if err != nil {
			t.Fatalf("Encode: %v", err)
		}
		want, err := oracleEncode(d)
		if err != nil {
			t.Fatalf("json.Marshal: %v", err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("Encode differs from encoding/json\n got: %s\nwant: %s", got, want)
		}
		back, layout, err := Decode(got)
		if err != nil {
			t.Fatalf("Decode(Encode(d)): %v\nfile: %s", err, got)
		}
		if layout != LayoutV2 {
			t.Errorf("layout = %v, want V2", layout)
		}
		if diff := cmp.Diff(d, back); diff != "" {
			t.Fatalf("Decode(Encode(d)) differs (-want +got):\n%s", diff)
		}
	})
}

// FuzzJSONString proves the string quoting identical to encoding/json for
// any valid UTF-8 string (invalid ones are refused before quoting).
func FuzzJSONString(f *testing.F) {
	for _, s := range fuzzStrings {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if !utf8.ValidString(s) {
			return
		}
		if got := appendJSONString(nil, s); !bytes.Equal(got, want) {
			t.Fatalf("appendJSONString(%q) = %s, want %s", s, got, want)
		}
	})
}

// TestEncodeInvalidUTF8 checks that Encode refuses data whose JSON would not
// verify, and names the offending string.
func TestEncodeInvalidUTF8(t *testing.T) {
	d := &Data{RegisteredDevices: map[string][]string{"example.com/gpu": {"ok", "bad\xff"}}}
	_, err := Encode(d)
	if !errors.Is(err, ErrInvalidUTF8) {
		t.Fatalf("err = %v, want ErrInvalidUTF8", err)
	}
	if want := `"bad\xff"`; !bytes.Contains([]byte(err.Error()), []byte(want)) {
		t.Errorf("error %q does not name %s", err, want)
	}
}

// TestEncodeNilData checks that a nil *Data encodes as the zero Data.
func TestEncodeNilData(t *testing.T) {
	got, err := Encode(nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := specVectors[2].file; string(got) != want {
		t.Errorf("Encode(nil) = %s, want %s", got, want)
	}
}
