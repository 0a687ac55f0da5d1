package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
)

// fileV2 and fileV1 are the two on-disk shapes. Decoding means what
// encoding/json means, like the kubelet: keys match case-insensitively,
// unknown keys are ignored, null gives nil, [] and {} give non-nil empty
// values, and "" gives a non-nil empty AllocResp. Because the exported types
// carry the kubelet's type names, decoder errors read exactly like the
// kubelet's (for example "json: cannot unmarshal array into Go struct field
// PodDevicesEntry.Data.PodDeviceEntries.DeviceIDs of type
// checkpoint.DevicesPerNUMA"). The plain V2 files kdm and the kubelet write
// take a reflection-free parser with the same results (parseV2Fast);
// everything else goes through encoding/json itself.
type fileV2 struct {
	Data     Data
	Checksum uint64
}

type fileV1 struct {
	Data     dataV1
	Checksum uint64
}

// parseV2 decodes b into a fresh V2 file whose entry list and registered
// devices start as non-nil empty values, as the kubelet's reader does; a
// file that omits those keys therefore hashes them as [] and map[]. Plain
// input takes parseV2Fast; the result is the same as parseV2JSON's.
func parseV2(b []byte) (*fileV2, error) {
	if f, ok := parseV2Fast(b); ok {
		return f, nil
	}
	return parseV2JSON(b)
}

// parseV2JSON is parseV2 with encoding/json alone: the reference for every
// input, and the path for whatever parseV2Fast leaves alone. Its errors are
// the kubelet's.
func parseV2JSON(b []byte) (*fileV2, error) {
	f := &fileV2{Data: Data{
		PodDeviceEntries:  []PodDevicesEntry{},
		RegisteredDevices: map[string][]string{},
	}}
	if err := json.Unmarshal(b, f); err != nil {
		return nil, err
	}
	return f, nil
}

// parseV1 is parseV2 for the pre-1.20 layout, with the same initial values
// as the 1.20-1.29 fallback reader.
func parseV1(b []byte) (*fileV1, error) {
	f := &fileV1{Data: dataV1{
		PodDeviceEntries:  []podDevicesEntryV1{},
		RegisteredDevices: map[string][]string{},
	}}
	if err := json.Unmarshal(b, f); err != nil {
		return nil, err
	}
	return f, nil
}

// classify turns the V2 decoder's error into ErrNotJSON or ErrUnknownLayout.
// It is only called once the V1 shape has failed too.
func classify(v2err error) error {
	var syn *json.SyntaxError
	if errors.As(v2err, &syn) {
		return fmt.Errorf("%w: %w", ErrNotJSON, v2err)
	}
	return fmt.Errorf("%w: %w", ErrUnknownLayout, v2err)
}

// decodeEntries is Decode that also returns the entries as Entries: entries[i]
// holds PodDeviceEntries[i], sharing its lists and bytes.
func decodeEntries(b []byte) (*Data, []*Entry, Layout, error) {
	d, layout, err := Decode(b)
	if err != nil {
		return nil, nil, layout, err
	}
	entries := make([]*Entry, len(d.PodDeviceEntries))
	for i := range d.PodDeviceEntries {
		entries[i] = NewEntry(d.PodDeviceEntries[i])
	}
	return d, entries, layout, nil
}

// Decode is checkpoint.Decode.
func Decode(b []byte) (*Data, Layout, error) {
	return decode(b, parseV2)
}

// decode is Decode with the V2 parser passed in, so tests can run the
// encoding/json-only path (parseV2JSON) beside the real one.
func decode(b []byte, parse func([]byte) (*fileV2, error)) (*Data, Layout, error) {
	v2, v2err := parse(b)
	if v2err == nil {
		computed := uint64(Checksum(&v2.Data))
		if v2.Checksum == computed {
			return &v2.Data, LayoutV2, nil
		}
		if v1, err := parseV1(b); err == nil && v1.Checksum == uint64(checksumV1(&v1.Data)) {
			return v1.Data.toV2(), LayoutV1, nil
		}
		return nil, LayoutV2, &ChecksumError{Stored: v2.Checksum, Computed: computed, Layout: LayoutV2}
	}
	v1, err := parseV1(b)
	if err != nil {
		return nil, LayoutV2, classify(v2err)
	}
	computed := uint64(checksumV1(&v1.Data))
	if v1.Checksum != computed {
		return nil, LayoutV1, &ChecksumError{Stored: v1.Checksum, Computed: computed, Layout: LayoutV1}
	}
	return v1.Data.toV2(), LayoutV1, nil
}

// DecodeUnverified is checkpoint.DecodeUnverified.
func DecodeUnverified(b []byte) (*Data, Layout, uint64, error) {
	return decodeUnverified(b, parseV2)
}

// decodeUnverified is DecodeUnverified with the V2 parser passed in, like
// decode.
func decodeUnverified(b []byte, parse func([]byte) (*fileV2, error)) (*Data, Layout, uint64, error) {
	v2, v2err := parse(b)
	if v2err == nil {
		return &v2.Data, LayoutV2, v2.Checksum, nil
	}
	v1, err := parseV1(b)
	if err != nil {
		return nil, LayoutV2, 0, classify(v2err)
	}
	return v1.Data.toV2(), LayoutV1, v1.Checksum, nil
}
