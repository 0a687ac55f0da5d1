package checkpoint

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// benchAllocResp is a realistic response for four GPUs: an env var, four
// device nodes and a driver mount, about 200 bytes of protobuf.
func benchAllocResp(tb testing.TB, pod int) []byte {
	resp := &pluginapi.ContainerAllocateResponse{
		Envs:   map[string]string{"NVIDIA_VISIBLE_DEVICES": fmt.Sprintf("%d,%d,%d,%d", 4*pod, 4*pod+1, 4*pod+2, 4*pod+3)},
		Mounts: []*pluginapi.Mount{{ContainerPath: "/usr/local/nvidia", HostPath: "/run/nvidia/driver", ReadOnly: true}},
	}
	for i := 0; i < 4; i++ {
		p := fmt.Sprintf("/dev/nvidia%d", 4*pod+i)
		resp.Devices = append(resp.Devices, &pluginapi.DeviceSpec{ContainerPath: p, HostPath: p, Permissions: "rw"})
	}
	b, err := proto.Marshal(resp)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// benchData is pods pods x 1 container x 4 devices on two NUMA nodes, with
// every device registered.
func benchData(tb testing.TB, pods int) *Data {
	d := &Data{RegisteredDevices: map[string][]string{"nvidia.com/gpu": {}}}
	for p := 0; p < pods; p++ {
		ids := make([]string, 4)
		for i := range ids {
			ids[i] = fmt.Sprintf("GPU-%08x-4b1e-9d7a-%012d", p, i)
		}
		d.RegisteredDevices["nvidia.com/gpu"] = append(d.RegisteredDevices["nvidia.com/gpu"], ids...)
		d.PodDeviceEntries = append(d.PodDeviceEntries, PodDevicesEntry{
			PodUID:        fmt.Sprintf("6f1c2b7e-3a41-4c1e-9d7a-%012d", p),
			ContainerName: "cuda",
			ResourceName:  "nvidia.com/gpu",
			DeviceIDs:     DevicesPerNUMA{0: ids[:2], 1: ids[2:]},
			AllocResp:     benchAllocResp(tb, p),
		})
	}
	return d
}

var benchSizes = []int{10, 100, 1000}

// BenchmarkEncode measures the hand-written emitters: checksum plus JSON.
func BenchmarkEncode(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("pods=%d", n), func(b *testing.B) {
			d := benchData(b, n)
			out, err := Encode(d)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(out)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Encode(d); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkEncodePrepared measures the steady state of a writer that keeps its entries: each
// op encodes the same entries plus one new last entry, as after admitting a pod whose UID
// sorts last, so every other entry's JSON and hash are reused.
func BenchmarkEncodePrepared(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("pods=%d", n), func(b *testing.B) {
			d := benchData(b, n+1)
			p := prepare(d)
			last := p.Entries[n].PodDevicesEntry
			out, err := EncodePrepared(p)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(out)))
			b.ReportAllocs()
			for b.Loop() {
				p.Entries[n] = NewEntry(last)
				if _, err := EncodePrepared(p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkChecksum measures the checksum emitter alone.
func BenchmarkChecksum(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("pods=%d", n), func(b *testing.B) {
			d := benchData(b, n)
			b.ReportAllocs()
			for b.Loop() {
				Checksum(d)
			}
		})
	}
}

// BenchmarkSpewReference is the kubelet's way: go-spew via dump.ForHash and
// fnv for the checksum, then encoding/json of mirror structs.
func BenchmarkSpewReference(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("pods=%d", n), func(b *testing.B) {
			d := benchData(b, n)
			out, err := oracleEncode(d)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(out)))
			b.ReportAllocs()
			for b.Loop() {
				f := oracleFile{Data: mirror(d), Checksum: uint64(oracleChecksum(d))}
				if _, err := json.Marshal(f); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkWrite measures a durable Store.Write (encode, temp file, fsync,
// rename, directory fsync) into a temporary directory.
func BenchmarkWrite(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("pods=%d", n), func(b *testing.B) {
			d := benchData(b, n)
			s, err := NewStore(StoreConfig{Dir: b.TempDir()})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if err := s.Write(d); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkWritePreparedArrival measures the durable WritePrepared of an Allocate on a node
// of pods pods whose entries the writer keeps: per op the pod that arrived in the previous op
// leaves and a new one arrives, its entry at the end of the file (where the device manager
// puts a new pod's), in the middle or at the start. A write through the spare leaves in place
// the entries before the first change (see replaceViaSpare), so the three show what a write
// costs as the change moves forward, as it does in the device manager's file when the pod
// that leaves is an older one.
func BenchmarkWritePreparedArrival(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		d := benchData(b, n)
		base := make([]*Entry, n)
		for i, e := range d.PodDeviceEntries {
			base[i] = NewEntry(e)
		}
		reg := []*Registered{NewRegistered("nvidia.com/gpu", d.RegisteredDevices["nvidia.com/gpu"])}
		for _, at := range []struct {
			name string
			pos  int
		}{{"end", n}, {"middle", n / 2}, {"start", 0}} {
			b.Run(fmt.Sprintf("pods=%d,at=%s", n, at.name), func(b *testing.B) {
				s, err := NewStore(StoreConfig{Dir: b.TempDir()})
				if err != nil {
					b.Fatal(err)
				}
				arrival := d.PodDeviceEntries[0]
				entries := make([]*Entry, 0, n+1)
				b.ReportAllocs()
				for b.Loop() {
					e := NewEntry(arrival) // a new pod: its entry is encoded and hashed once
					entries = append(append(append(entries[:0], base[:at.pos]...), e), base[at.pos:]...)
					if err := s.WritePrepared(&Prepared{Entries: entries, Registered: reg}); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkWritePreparedDeparture measures the durable WritePrepared of an Allocate on a
// node of pods pods, as the device manager's file changes: per op a new pod's entry goes at
// the end and one pod leaves, the newest (the previous op's), the oldest (the file's first
// entry) or one drawn at random. Unlike BenchmarkWritePreparedArrival, where the entries
// after the change follow the same text every time, a departure leaves every later entry
// after a different state of the checksum's chain, as in the device manager.
func BenchmarkWritePreparedDeparture(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		d := benchData(b, n)
		reg := []*Registered{NewRegistered("nvidia.com/gpu", d.RegisteredDevices["nvidia.com/gpu"])}
		for _, order := range []string{"newest", "oldest", "random"} {
			b.Run(fmt.Sprintf("pods=%d,departs=%s", n, order), func(b *testing.B) {
				s, err := NewStore(StoreConfig{Dir: b.TempDir()})
				if err != nil {
					b.Fatal(err)
				}
				live := make([]*Entry, 0, n+1)
				for _, e := range d.PodDeviceEntries {
					live = append(live, NewEntry(e))
				}
				if err := s.WritePrepared(&Prepared{Entries: live, Registered: reg}); err != nil {
					b.Fatal(err)
				}
				random := rand.New(rand.NewPCG(uint64(n), 0x5eed))
				next := n
				b.ReportAllocs()
				for b.Loop() {
					arrival := d.PodDeviceEntries[next%n]
					arrival.PodUID = fmt.Sprintf("6f1c2b7e-3a41-4c1e-9d7a-%012d", next)
					live = append(live, NewEntry(arrival))
					if err := s.WritePrepared(&Prepared{Entries: live, Registered: reg}); err != nil {
						b.Fatal(err)
					}
					i := len(live) - 1
					switch order {
					case "oldest":
						i = 0
					case "random":
						i = random.IntN(len(live))
					}
					live = slices.Delete(live, i, i+1)
					next++
				}
			})
		}
	}
}

// TestBenchDataShape keeps the benchmark honest: about 200 bytes of
// AllocResp per entry, and Encode equal to the reference.
func TestBenchDataShape(t *testing.T) {
	d := benchData(t, 10)
	for _, e := range d.PodDeviceEntries {
		if n := len(e.AllocResp); n < 150 || n > 260 {
			t.Errorf("AllocResp is %d bytes, want about 200", n)
		}
	}
	got, err := Encode(d)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := oracleEncode(d)
	if string(got) != string(want) {
		t.Error("Encode differs from the reference on benchmark data")
	}
}

// BenchmarkDecode measures Decode (parse and verify) of Encode's output,
// the restart path. The encoding-json sub-benchmarks run the same Decode
// with the reflection-based V2 parser only, for comparison.
func BenchmarkDecode(b *testing.B) {
	paths := []struct {
		name  string
		parse func([]byte) (*fileV2, error)
	}{{"", parseV2}, {"encoding-json/", parseV2JSON}}
	for _, path := range paths {
		for _, n := range benchSizes {
			b.Run(fmt.Sprintf("%spods=%d", path.name, n), func(b *testing.B) {
				in, err := Encode(benchData(b, n))
				if err != nil {
					b.Fatal(err)
				}
				b.SetBytes(int64(len(in)))
				b.ReportAllocs()
				for b.Loop() {
					if _, _, err := decode(in, path.parse); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
