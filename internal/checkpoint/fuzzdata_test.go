package checkpoint

import (
	"encoding/binary"
	"math"
)

// fuzzReader turns fuzzer bytes into checkpoint Data deterministically, so
// that every shape the format allows is reachable: nil and empty slices and
// maps, control characters, HTML characters, invalid UTF-8, U+2028,
// spew-significant text ("map[", "<nil>", type names), negative and extreme
// NUMA ids, and AllocResp from absent to several KiB.
type fuzzReader struct {
	b []byte
}

func (r *fuzzReader) byte() byte {
	if len(r.b) == 0 {
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *fuzzReader) take(n int) []byte {
	n = min(n, len(r.b))
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

// interesting strings that stress the JSON escaper and the hash grammar.
var fuzzStrings = []string{
	"", "\u0000", "a b", "<>&", "\"\\/", "\b\f\n\r\t\x01\x1f\x7f", "\u2028\u2029", "é日本",
	"\xff\xfe", "map[", "<nil>", "]", ":", "PodDevicesEntryV1", "checkpointDataV1",
	"example.com/gpu", "gpu-0", "11111111-2222-4333-8444-000000000001", "B/a", "a/b",
}

var fuzzNUMA = []int64{-1, 0, 1, 2, 10, -10, 9, 100, math.MinInt64, math.MaxInt64}

func (r *fuzzReader) string() string {
	c := r.byte()
	if c < 160 {
		return fuzzStrings[int(c)%len(fuzzStrings)]
	}
	return string(r.take(int(c) % 24))
}

// count returns -1 for nil, else a length below max.
func (r *fuzzReader) count(max int) int {
	c := int(r.byte())
	switch c % 5 {
	case 0:
		return -1
	case 1:
		return 0
	default:
		return c / 5 % max
	}
}

func (r *fuzzReader) strings() []string {
	n := r.count(5)
	if n < 0 {
		return nil
	}
	out := make([]string, n)
	for i := range out {
		out[i] = r.string()
	}
	return out
}

func (r *fuzzReader) numa() int64 {
	c := r.byte()
	if c < 200 {
		return fuzzNUMA[int(c)%len(fuzzNUMA)]
	}
	var b [8]byte
	copy(b[:], r.take(8))
	return int64(binary.LittleEndian.Uint64(b[:]))
}

func (r *fuzzReader) allocResp() []byte {
	c := r.byte()
	switch {
	case c%7 == 0:
		return nil
	case c%7 == 1:
		return []byte{}
	case c >= 240:
		// Large: several KiB, every byte value, without needing fuzz input.
		out := make([]byte, int(c-239)*1021)
		for i := range out {
			out[i] = byte(i * 7)
		}
		return out
	default:
		return append([]byte{}, r.take(int(c)%40)...)
	}
}

func (r *fuzzReader) data() *Data {
	d := &Data{}
	if n := r.count(6); n >= 0 {
		d.PodDeviceEntries = make([]PodDevicesEntry, n)
		for i := range d.PodDeviceEntries {
			e := &d.PodDeviceEntries[i]
			e.PodUID, e.ContainerName, e.ResourceName = r.string(), r.string(), r.string()
			if k := r.count(4); k >= 0 {
				e.DeviceIDs = DevicesPerNUMA{}
				for j := 0; j < k; j++ {
					e.DeviceIDs[r.numa()] = r.strings()
				}
			}
			e.AllocResp = r.allocResp()
		}
	}
	if n := r.count(5); n >= 0 {
		d.RegisteredDevices = map[string][]string{}
		for j := 0; j < n; j++ {
			d.RegisteredDevices[r.string()] = r.strings()
		}
	}
	return d
}

func fuzzData(b []byte) *Data {
	r := fuzzReader{b: b}
	return r.data()
}

// fuzzSeeds are hand-picked inputs for the Data-driven fuzz targets; the
// same bytes are stored under testdata/fuzz.
var fuzzSeeds = [][]byte{
	{},                          // nil entries, nil registered devices
	{1, 1},                      // [] and map[]
	{7, 1, 2, 3, 7, 0, 7, 7, 1}, // one entry with NUMA -1 and empty strings
	{12, 16, 1, 3, 22, 1, 14, 2, 4, 0, 22, 1, 12, 6, 12, 7, 8, 2, 250, 11, 5, 2, 17, 19, 22, 18, 19},
	{7, 0, 0, 0, 7, 7, 22, 0, 1, 2, 22, 4, 5, 241, 1},
	{17, 9, 10, 13, 12, 4, 17, 200, 255, 255, 255, 255, 255, 255, 255, 127, 7, 3, 8, 7, 201, 0, 0, 0, 0, 0, 0, 0, 128, 7, 4, 8, 9, 245, 12, 14, 13, 14, 15, 16},
}
