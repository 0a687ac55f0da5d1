package checkpoint

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
)

// specVectors are checkpoint files written by the upstream kubelet code, each with its checksum
// (docs/behaviour.md#checkpoint-checksum lists the short ones).
var specVectors = []struct {
	name string
	file string
	sum  uint32
}{
	{
		name: "fresh kubelet",
		file: `{"Data":{"PodDeviceEntries":null,"RegisteredDevices":{}},"Checksum":3467439661}`,
		sum:  3467439661,
	},
	{
		name: "resource with no healthy devices",
		file: `{"Data":{"PodDeviceEntries":null,"RegisteredDevices":{"example.com/gpu":[]}},"Checksum":2838580107}`,
		sum:  2838580107,
	},
	{
		name: "all null",
		file: `{"Data":{"PodDeviceEntries":null,"RegisteredDevices":null},"Checksum":1944006890}`,
		sum:  1944006890,
	},
	{
		name: "edge cases",
		file: `{"Data":{"PodDeviceEntries":[{"PodUID":"u 1","ContainerName":"c\u003c\u0026\u003e","ResourceName":"r/x","DeviceIDs":{"-1":["z"],"10":["a"],"2":["b","a"]},"AllocResp":""}],"RegisteredDevices":{"B/a":null,"a/b":["d2","d1"],"b/z":[]}},"Checksum":1674221738}`,
		sum:  1674221738,
	},
	{
		name: "one pod, two containers, two resources",
		file: `{"Data":{"PodDeviceEntries":[{"PodUID":"6f1c2b7e-3a41-4c1e-9d7a-2f5e8b0c9a11","ContainerName":"app","ResourceName":"example.com/gpu","DeviceIDs":{"0":["gpu-0"],"1":["gpu-1"]},"AllocResp":"CiYKF0VYQU1QTEVfVklTSUJMRV9ERVZJQ0VTEgtncHUtMCxncHUtMRoaCgkvZGV2L2dwdTASCS9kZXYvZ3B1MBoCcncaGgoJL2Rldi9ncHUxEgkvZGV2L2dwdTEaAnJ3"},{"PodUID":"6f1c2b7e-3a41-4c1e-9d7a-2f5e8b0c9a11","ContainerName":"app","ResourceName":"example.com/fpga","DeviceIDs":{"-1":["fpga-0"]},"AllocResp":"KhkKF2V4YW1wbGUuY29tL2ZwZ2E9ZnBnYS0w"},{"PodUID":"6f1c2b7e-3a41-4c1e-9d7a-2f5e8b0c9a11","ContainerName":"sidecar","ResourceName":"example.com/gpu","DeviceIDs":{"1":["gpu-2"]},"AllocResp":"CiAKF0VYQU1QTEVfVklTSUJMRV9ERVZJQ0VTEgVncHUtMhIeCgwvdXNyL2xpYi9ncHUSDC9vcHQvZ3B1L2xpYhgB"}],"RegisteredDevices":{"example.com/fpga":["fpga-0"],"example.com/gpu":["gpu-0","gpu-1","gpu-2","gpu-3"]}},"Checksum":453689565}`,
		sum:  453689565,
	},
}

// TestSpecVectors decodes each vector (which verifies its checksum),
// checks Checksum and the oracle give the published sum, and checks Encode
// gives the file back byte for byte.
func TestSpecVectors(t *testing.T) {
	for _, v := range specVectors {
		t.Run(v.name, func(t *testing.T) {
			d, layout, err := Decode([]byte(v.file))
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if layout != LayoutV2 {
				t.Errorf("layout = %v, want V2", layout)
			}
			if got := Checksum(d); got != v.sum {
				t.Errorf("Checksum = %d, want %d", got, v.sum)
			}
			if got := oracleChecksum(d); got != v.sum {
				t.Errorf("oracle checksum = %d, want %d (the oracle itself is wrong)", got, v.sum)
			}
			enc, err := Encode(d)
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			if string(enc) != v.file {
				t.Errorf("Encode mismatch\n got: %s\nwant: %s", enc, v.file)
			}
		})
	}
}

// TestHashTextExample checks the start of the hashed text of the three-entry vector
// (docs/behaviour.md#checkpoint-checksum).
func TestHashTextExample(t *testing.T) {
	d, _, err := Decode([]byte(specVectors[4].file))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := writeHashInput(&buf, d); err != nil {
		t.Fatal(err)
	}
	const prefix = "(checkpoint.checkpointData){PodDeviceEntries:([]checkpoint.PodDevicesEntry)[{PodUID:(string)6f1c2b7e-3a41-4c1e-9d7a-2f5e8b0c9a11 ContainerName:(string)app ResourceName:(string)example.com/gpu DeviceIDs:(checkpoint.DevicesPerNUMA)map[0:[gpu-0] 1:[gpu-1]] AllocResp:([]uint8)[10 38 10 23 69 "
	const suffix = " RegisteredDevices:(map[string][]string)map[example.com/fpga:[fpga-0] example.com/gpu:[gpu-0 gpu-1 gpu-2 gpu-3]]}"
	if s := buf.String(); !strings.HasPrefix(s, prefix) || !strings.HasSuffix(s, suffix) {
		t.Errorf("hash text = %s", s)
	}
}

// TestNilVersusEmpty pins the nil-versus-empty rule of docs/behaviour.md#checkpoint-checksum: nil and empty values are distinct
// in both the JSON and the hashed text.
func TestNilVersusEmpty(t *testing.T) {
	cases := []struct {
		name     string
		d        Data
		json     string
		hashText string
	}{
		{"nil entries", Data{}, `"PodDeviceEntries":null`, "PodDevicesEntry)<nil> "},
		{"empty entries", Data{PodDeviceEntries: []PodDevicesEntry{}}, `"PodDeviceEntries":[]`, "PodDevicesEntry)[] "},
		{"nil registered", Data{}, `"RegisteredDevices":null`, "(map[string][]string)<nil>}"},
		{"empty registered", Data{RegisteredDevices: map[string][]string{}}, `"RegisteredDevices":{}`, "(map[string][]string)map[]}"},
		{"nil device list", Data{RegisteredDevices: map[string][]string{"r": nil}}, `{"r":null}`, "map[r:<nil>]"},
		{"empty device list", Data{RegisteredDevices: map[string][]string{"r": {}}}, `{"r":[]}`, "map[r:[]]"},
		{"nil DeviceIDs", Data{PodDeviceEntries: []PodDevicesEntry{{}}}, `"DeviceIDs":null`, "DevicesPerNUMA)<nil> "},
		{"empty DeviceIDs", Data{PodDeviceEntries: []PodDevicesEntry{{DeviceIDs: DevicesPerNUMA{}}}}, `"DeviceIDs":{}`, "DevicesPerNUMA)map[] "},
		{"nil AllocResp", Data{PodDeviceEntries: []PodDevicesEntry{{}}}, `"AllocResp":null`, "([]uint8)<nil>}"},
		{"empty AllocResp", Data{PodDeviceEntries: []PodDevicesEntry{{AllocResp: []byte{}}}}, `"AllocResp":""`, "([]uint8)[]}"},
		{"NUMA key order", Data{PodDeviceEntries: []PodDevicesEntry{{DeviceIDs: DevicesPerNUMA{2: {"b"}, 10: {"a"}, -1: {"z"}}}}},
			`{"-1":["z"],"10":["a"],"2":["b"]}`, "map[-1:[z] 2:[b] 10:[a]]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			enc, err := Encode(&c.d)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(enc), c.json) {
				t.Errorf("JSON %s does not contain %s", enc, c.json)
			}
			var buf bytes.Buffer
			if err := writeHashInput(&buf, &c.d); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(buf.String(), c.hashText) {
				t.Errorf("hash text %s does not contain %s", buf.String(), c.hashText)
			}
			if got, want := Checksum(&c.d), oracleChecksum(&c.d); got != want {
				t.Errorf("Checksum = %d, oracle = %d", got, want)
			}
		})
	}
}

// TestChecksumV1 checks the V1 checksum against the legacy-v1-valid golden
// (written by kubelet 1.29's V1 code) and the example of docs/behaviour.md#legacy-v1-checkpoints.
func TestChecksumV1(t *testing.T) {
	cases := []struct {
		name string
		file string
		sum  uint32
	}{
		{"legacy-v1-valid golden", string(readGolden(t, "legacy-v1-valid")), 1965403029},
		{"documented V1 example", `{"Data":{"PodDeviceEntries":[{"PodUID":"p1","ContainerName":"c1","ResourceName":"example.com/gpu","DeviceIDs":["gpu-0","gpu-1"],"AllocResp":""}],"RegisteredDevices":{"example.com/gpu":["gpu-0","gpu-1"]}},"Checksum":719163963}`, 719163963},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, err := parseV1([]byte(c.file))
			if err != nil {
				t.Fatal(err)
			}
			if got := checksumV1(&f.Data); got != c.sum {
				t.Errorf("checksumV1 = %d, want %d", got, c.sum)
			}
			if got := oracleChecksumV1(&f.Data); got != c.sum {
				t.Errorf("oracle V1 checksum = %d, want %d (the oracle itself is wrong)", got, c.sum)
			}
			if _, layout, err := Decode([]byte(c.file)); err != nil || layout != LayoutV1 {
				t.Errorf("Decode = layout %v, err %v; want V1, nil", layout, err)
			}
		})
	}
}

// TestChecksumNilData checks that a nil *Data is the zero Data.
func TestChecksumNilData(t *testing.T) {
	if got, want := Checksum(nil), uint32(1944006890); got != want {
		t.Errorf("Checksum(nil) = %d, want %d", got, want)
	}
}

// FuzzChecksum proves the grammar emitter equal to the kubelet's way
// (go-spew via dump.ForHash over checkpointData, then fnv.New32a) on
// arbitrary data, for both the V2 checksum and the V1 checksum.
func FuzzChecksum(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		d := fuzzData(b)
		var buf bytes.Buffer
		if err := writeHashInput(&buf, d); err != nil {
			t.Fatal(err)
		}
		if want := oracleHashText(d); buf.String() != want {
			t.Fatalf("hash text differs\n got: %q\nwant: %q", buf.String(), want)
		}
		if got, want := Checksum(d), oracleChecksum(d); got != want {
			t.Fatalf("Checksum = %d, oracle = %d", got, want)
		}
		v1 := toV1(d)
		if got, want := checksumV1(v1), oracleChecksumV1(v1); got != want {
			t.Fatalf("checksumV1 = %d, oracle = %d", got, want)
		}
	})
}

// TestHashTables checks every precomputed transform against plain FNV-1a:
// each grammar fragment from many states, and the per-byte tables for every
// (byte, incoming low byte) pair.
func TestHashTables(t *testing.T) {
	tb := hashTablesOnce()
	frags := []*fragment{tb.head, tb.headV1, tb.reg, tb.podUID, tb.container, tb.resource,
		tb.devices, tb.devicesV1, tb.allocResp, tb.nilText, tb.mapOpen}
	for _, f := range frags {
		for h := uint32(0); h < 1<<20; h += 997 {
			hh := h * 2654435761
			if got, want := f.apply(hh), fnv1a(hh, f.s); got != want {
				t.Fatalf("fragment %q from %#x: %#x, want %#x", f.s, hh, got, want)
			}
		}
	}
	for c := 0; c < 256; c++ {
		text := " " + strconv.Itoa(c)
		for l := 0; l < 256; l++ {
			h := (uint32(c*0x9e3779b1)^uint32(l*0x85ebca6b))&^0xff | uint32(l)
			want := fnv1a(h, text)
			if got := tb.byteMul[c]*h + tb.byteAdd[c][l&63]; got != want {
				t.Fatalf("byte %d from %#x: %#x, want %#x", c, h, got, want)
			}
			if got := tb.byteNext[c][l]; got != uint8(want) {
				t.Fatalf("byte %d from low byte %d: next low byte %d, want %d", c, l, got, uint8(want))
			}
		}
	}
}

// TestChecksumIsHashOfText checks Checksum equals FNV-1a over writeHashInput
// (the two paths share the emitter but hash differently).
func TestChecksumIsHashOfText(t *testing.T) {
	for _, seed := range fuzzSeeds {
		d := fuzzData(seed)
		var buf bytes.Buffer
		if err := writeHashInput(&buf, d); err != nil {
			t.Fatal(err)
		}
		if got, want := Checksum(d), fnv1a(fnvOffset32, buf.Bytes()); got != want {
			t.Errorf("Checksum = %d, FNV of text = %d", got, want)
		}
	}
}
