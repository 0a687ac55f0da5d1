package checkpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// goldenDir holds checkpoints written by the real kubelet v1.36.0 (and one by
// the v1.29.0 V1 code); see its README.md.
const goldenDir = "../../testdata/kubelet-1.36-checkpoints"

func readGolden(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(goldenDir, name, FileName))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// scenario is the part of scenario.json the checkpoint package can check.
type scenario struct {
	Checkpoint struct {
		ChecksumField string `json:"checksum_field"`
	} `json:"checkpoint"`
	Expected *struct {
		RegisteredDevices map[string][]string `json:"registered_devices"`
		EntryCount        int                 `json:"entry_count"`
		Allocations       []string            `json:"allocations"`
		Entries           []json.RawMessage   `json:"entries"`
	} `json:"expected"`
	UpstreamRestartView struct {
		ReadError string `json:"read_error"`
	} `json:"upstream_restart_view"`
}

// scenarioEntry is one expected entry. Unknown fields fail the test, so a
// richer scenario cannot be silently half-checked.
type scenarioEntry struct {
	PodUID          string              `json:"pod_uid"`
	Container       string              `json:"container"`
	Resource        string              `json:"resource"`
	DeviceIDsByNUMA map[string][]string `json:"device_ids_by_numa"`
	AllocResp       struct {
		Envs       map[string]string `json:"envs"`
		Devices    []string          `json:"devices"`
		CDIDevices []string          `json:"cdi_devices"`
	} `json:"alloc_resp"`
	AllocRespBytes int `json:"alloc_resp_bytes"`
}

func strictUnmarshal(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// entryKey identifies an entry: pod UID, container, resource.
type entryKey struct{ pod, container, resource string }

// allocationRE parses "uid/container/example.com/gpu numa-1=[gpu-0 gpu-1] numa0=[...]".
var (
	allocationRE = regexp.MustCompile(`^([^/ ]+)/([^/ ]+)/(\S+)((?: numa-?\d+=\[[^\]]*\])+)$`)
	numaRE       = regexp.MustCompile(`numa(-?\d+)=\[([^\]]*)\]`)
)

func parseAllocation(t *testing.T, s string) (entryKey, DevicesPerNUMA) {
	t.Helper()
	m := allocationRE.FindStringSubmatch(s)
	if m == nil {
		t.Fatalf("cannot parse allocation %q", s)
	}
	devs := DevicesPerNUMA{}
	for _, nm := range numaRE.FindAllStringSubmatch(m[4], -1) {
		node, err := strconv.ParseInt(nm[1], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		devs[node] = strings.Fields(nm[2])
	}
	return entryKey{m[1], m[2], m[3]}, devs
}

// TestGoldenCheckpoints walks every golden directory. Each must be covered:
// either its scenario.json has expected state, or it is one of the named
// error and legacy cases.
func TestGoldenCheckpoints(t *testing.T) {
	dirs, err := os.ReadDir(goldenDir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, de := range dirs {
		if !de.IsDir() {
			continue
		}
		n++
		name := de.Name()
		t.Run(name, func(t *testing.T) {
			raw := readGolden(t, name)
			var sc scenario
			sb, err := os.ReadFile(filepath.Join(goldenDir, name, "scenario.json"))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(sb, &sc); err != nil {
				t.Fatal(err)
			}
			switch name {
			case "corrupt-checksum":
				checkCorruptChecksum(t, raw, sc)
			case "legacy-v1-shape":
				checkLegacyV1Shape(t, raw, sc)
			case "legacy-v1-valid":
				checkLegacyV1Valid(t, raw)
			default:
				checkGoldenState(t, name, raw, sc)
			}
		})
	}
	if n < 10 {
		t.Errorf("found %d golden directories, want at least 10", n)
	}
}

// checkGoldenState decodes a kubelet-written checkpoint and compares it with
// the scenario's recorded state, then re-encodes it byte for byte and
// compares the hashed text with checksum_input.txt.
func checkGoldenState(t *testing.T, name string, raw []byte, sc scenario) {
	if sc.Expected == nil {
		t.Fatalf("scenario %s has no expected state and no special case", name)
	}
	d, layout, err := Decode(raw)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if layout != LayoutV2 {
		t.Errorf("layout = %v", layout)
	}
	if got := strconv.FormatUint(uint64(Checksum(d)), 10); got != sc.Checkpoint.ChecksumField {
		t.Errorf("Checksum = %s, scenario says %s", got, sc.Checkpoint.ChecksumField)
	}

	// Registered devices, compared as sets.
	gotReg := map[string][]string{}
	for k, v := range d.RegisteredDevices {
		gotReg[k] = slices.Sorted(slices.Values(v))
	}
	wantReg := map[string][]string{}
	for k, v := range sc.Expected.RegisteredDevices {
		wantReg[k] = slices.Sorted(slices.Values(v))
	}
	if diff := cmp.Diff(wantReg, gotReg); diff != "" {
		t.Errorf("registered devices (-want +got):\n%s", diff)
	}

	// Entries: count, devices per NUMA node from the allocations list.
	if len(d.PodDeviceEntries) != sc.Expected.EntryCount {
		t.Errorf("%d entries, want %d", len(d.PodDeviceEntries), sc.Expected.EntryCount)
	}
	got := map[entryKey]*PodDevicesEntry{}
	for i := range d.PodDeviceEntries {
		e := &d.PodDeviceEntries[i]
		k := entryKey{e.PodUID, e.ContainerName, e.ResourceName}
		if got[k] != nil {
			t.Errorf("duplicate entry %v", k)
		}
		got[k] = e
	}
	if len(sc.Expected.Allocations) != sc.Expected.EntryCount {
		t.Errorf("scenario lists %d allocations for %d entries", len(sc.Expected.Allocations), sc.Expected.EntryCount)
	}
	for _, a := range sc.Expected.Allocations {
		k, devs := parseAllocation(t, a)
		e := got[k]
		if e == nil {
			t.Errorf("no entry for allocation %q", a)
			continue
		}
		if diff := cmp.Diff(devs, e.DeviceIDs); diff != "" {
			t.Errorf("%v devices (-want +got):\n%s", k, diff)
		}
	}

	// Entries the scenario describes in full: AllocResp decoded as protobuf.
	for _, rawEntry := range sc.Expected.Entries {
		var se scenarioEntry
		if err := strictUnmarshal(rawEntry, &se); err != nil {
			t.Fatalf("scenario entry: %v", err)
		}
		k := entryKey{se.PodUID, se.Container, se.Resource}
		e := got[k]
		if e == nil {
			t.Errorf("no entry %v", k)
			continue
		}
		wantDevs := DevicesPerNUMA{}
		for node, ids := range se.DeviceIDsByNUMA {
			n, err := strconv.ParseInt(node, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			wantDevs[n] = ids
		}
		if diff := cmp.Diff(wantDevs, e.DeviceIDs); diff != "" {
			t.Errorf("%v devices (-want +got):\n%s", k, diff)
		}
		if len(e.AllocResp) != se.AllocRespBytes {
			t.Errorf("%v AllocResp is %d bytes, want %d", k, len(e.AllocResp), se.AllocRespBytes)
		}
		var resp pluginapi.ContainerAllocateResponse
		if err := proto.Unmarshal(e.AllocResp, &resp); err != nil {
			t.Fatalf("%v AllocResp: %v", k, err)
		}
		var devices, cdi []string
		for _, dev := range resp.GetDevices() {
			devices = append(devices, dev.GetContainerPath()+":"+dev.GetHostPath()+":"+dev.GetPermissions())
		}
		for _, c := range resp.GetCdiDevices() {
			cdi = append(cdi, c.GetName())
		}
		if diff := cmp.Diff(se.AllocResp.Envs, resp.GetEnvs()); diff != "" {
			t.Errorf("%v envs (-want +got):\n%s", k, diff)
		}
		if diff := cmp.Diff(se.AllocResp.Devices, devices); diff != "" {
			t.Errorf("%v device specs (-want +got):\n%s", k, diff)
		}
		if diff := cmp.Diff(se.AllocResp.CDIDevices, cdi); diff != "" {
			t.Errorf("%v CDI devices (-want +got):\n%s", k, diff)
		}
		if len(resp.GetMounts()) != 0 || len(resp.GetAnnotations()) != 0 {
			t.Errorf("%v has mounts or annotations the scenario does not record", k)
		}
	}

	// The goldens are in canonical order, so they are their own Sorted form,
	// and Encode reproduces them byte for byte.
	enc, err := Encode(d)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(enc, raw) {
		t.Errorf("Encode differs from the golden\n got: %s\nwant: %s", enc, raw)
	}
	if enc, _ := Encode(d.Sorted()); !bytes.Equal(enc, raw) {
		t.Errorf("Encode(Sorted) differs from the canonical golden")
	}

	want, err := os.ReadFile(filepath.Join(goldenDir, name, "checksum_input.txt"))
	if errors.Is(err, os.ErrNotExist) {
		return // large scenarios have no text file
	}
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	if err := writeHashInput(&text, d); err != nil {
		t.Fatal(err)
	}
	if text.String() != string(want) {
		t.Errorf("hash input differs\n got: %s\nwant: %s", text.String(), want)
	}
}

func checkCorruptChecksum(t *testing.T, raw []byte, sc scenario) {
	_, layout, err := Decode(raw)
	var ce *ChecksumError
	if !errors.As(err, &ce) {
		t.Fatalf("err = %v, want *ChecksumError", err)
	}
	if ce.Stored != 2503912198 || ce.Computed != 2503912197 || ce.Layout != LayoutV2 || layout != LayoutV2 {
		t.Errorf("ChecksumError = %+v, want stored 2503912198, computed 2503912197, V2", *ce)
	}
	for _, s := range []string{sc.UpstreamRestartView.ReadError, "2503912198", "2503912197"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not contain %q", err, s)
		}
	}
	if !errors.Is(err, ErrCorrupt) {
		t.Error("not ErrCorrupt")
	}
}

func checkLegacyV1Shape(t *testing.T, raw []byte, sc scenario) {
	// The V2 decoder fails exactly as the kubelet 1.36 reader does.
	if _, err := parseV2(raw); err == nil || err.Error() != sc.UpstreamRestartView.ReadError {
		t.Errorf("V2 decode error = %v, want %q", err, sc.UpstreamRestartView.ReadError)
	}
	// It is V1-shaped with a placeholder checksum; the real V1 sum of its
	// data is the one legacy-v1-valid carries.
	_, layout, err := Decode(raw)
	var ce *ChecksumError
	if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) {
		t.Fatalf("err = %v, want *ChecksumError", err)
	}
	if ce.Layout != LayoutV1 || layout != LayoutV1 || ce.Stored != 0 || ce.Computed != 1965403029 {
		t.Errorf("ChecksumError = %+v, want V1, stored 0, computed 1965403029", *ce)
	}
}

func checkLegacyV1Valid(t *testing.T, raw []byte) {
	d, layout, err := Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	if layout != LayoutV1 {
		t.Errorf("layout = %v, want V1", layout)
	}
	// The same data as 1pod-1ctr-1dev, with every device under NUMA node 0.
	want, _, err := Decode(readGolden(t, "1pod-1ctr-1dev"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range want.PodDeviceEntries {
		var all []string
		for _, ids := range want.PodDeviceEntries[i].DeviceIDs {
			all = append(all, ids...)
		}
		want.PodDeviceEntries[i].DeviceIDs = DevicesPerNUMA{0: all}
	}
	if diff := cmp.Diff(want, d); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
