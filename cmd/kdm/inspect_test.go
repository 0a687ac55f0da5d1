package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/checkpoint"
)

const goldens = "../../testdata/kubelet-1.36-checkpoints"

func inspect(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(append([]string{"inspect"}, args...), &out, &errOut)
	return code, out.String(), errOut.String()
}

// TestInspectGoldens: every valid golden prints a table with its entries; the corrupt and the
// placeholder-checksum files exit 1 naming the problem.
func TestInspectGoldens(t *testing.T) {
	dirs, err := os.ReadDir(goldens)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if !d.IsDir() {
			continue
		}
		file := filepath.Join(goldens, d.Name(), checkpoint.FileName)
		t.Run(d.Name(), func(t *testing.T) {
			code, out, errOut := inspect(t, file)
			switch d.Name() {
			case "corrupt-checksum", "legacy-v1-shape":
				if code != 1 || !strings.Contains(errOut, "checksum mismatch") || !strings.Contains(errOut, file) {
					t.Fatalf("exit %d, stderr %q: want 1 and a checksum mismatch naming the file", code, errOut)
				}
				return
			}
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			raw, _ := os.ReadFile(file)
			data, _, _ := checkpoint.Decode(raw)
			if !strings.Contains(out, "entries:  "+itoa(len(data.PodDeviceEntries))) {
				t.Fatalf("table does not report %d entries:\n%s", len(data.PodDeviceEntries), out)
			}
			for _, e := range data.PodDeviceEntries {
				if !strings.Contains(out, e.PodUID) || !strings.Contains(out, e.ResourceName) {
					t.Fatalf("entry %s/%s/%s missing from the table", e.PodUID, e.ContainerName, e.ResourceName)
				}
			}
			for res := range data.RegisteredDevices {
				if !strings.Contains(out, res) {
					t.Fatalf("registered resource %s missing", res)
				}
			}
		})
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestInspectJSONAndRewrite(t *testing.T) {
	file := filepath.Join(goldens, "2pods-init-app-2res", checkpoint.FileName)
	code, out, errOut := inspect(t, "--json", file)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var got inspected
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("--json output does not parse: %v", err)
	}
	if got.Layout != "V2" || len(got.Entries) != 8 || got.Entries[0].AllocResp == nil {
		t.Fatalf("--json: layout %s, %d entries, first alloc response %s", got.Layout, len(got.Entries), got.Entries[0].AllocResp)
	}

	// --rewrite writes the canonical form; the goldens are canonical already, so the bytes match.
	outFile := filepath.Join(t.TempDir(), "rewritten")
	if code, _, errOut := inspect(t, "--rewrite", outFile, file); code != 0 {
		t.Fatalf("--rewrite: exit %d: %s", code, errOut)
	}
	want, _ := os.ReadFile(file)
	gotBytes, _ := os.ReadFile(outFile)
	if !bytes.Equal(want, gotBytes) {
		t.Fatalf("rewritten file differs from the canonical golden")
	}
	if fi, _ := os.Stat(outFile); fi.Mode().Perm() != 0o600 {
		t.Fatalf("rewritten file mode %v, want 0600", fi.Mode().Perm())
	}
}

func TestInspectLegacyV1(t *testing.T) {
	code, out, errOut := inspect(t, filepath.Join(goldens, "legacy-v1-valid", checkpoint.FileName))
	if code != 0 || !strings.Contains(out, "layout:   V1") || !strings.Contains(out, "numa 0") {
		t.Fatalf("legacy V1: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestInspectUsage(t *testing.T) {
	if code, _, _ := inspect(t); code != 2 {
		t.Fatalf("no file: exit %d, want 2", code)
	}
	if code, _, errOut := inspect(t, "/nonexistent/kubelet_internal_checkpoint"); code != 1 || !strings.Contains(errOut, "no such file") {
		t.Fatalf("missing file: exit %d, %q", code, errOut)
	}
}

// writeCheckpoint encodes d with its checksum into a temp file and returns the path.
func writeCheckpoint(t *testing.T, d *checkpoint.Data) string {
	t.Helper()
	b, err := checkpoint.Encode(d)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), checkpoint.FileName)
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// TestInspectEscapesControlCharacters: smarter-device-manager style IDs "\x00", "\x01", "\x02" are
// printed as Go's %q prints them, never as raw control bytes, in the table and in --wide.
func TestInspectEscapesControlCharacters(t *testing.T) {
	resp, err := proto.Marshal(&pluginapi.ContainerAllocateResponse{Envs: map[string]string{"TTY": "\x1b[31mred"}})
	if err != nil {
		t.Fatal(err)
	}
	file := writeCheckpoint(t, &checkpoint.Data{
		PodDeviceEntries: []checkpoint.PodDevicesEntry{{
			PodUID: "pod-1", ContainerName: "c\x07", ResourceName: "smarter-devices/ttyUSB",
			DeviceIDs: checkpoint.DevicesPerNUMA{-1: {"\x00", "\x01"}}, AllocResp: resp,
		}},
		RegisteredDevices: map[string][]string{"smarter-devices/ttyUSB": {"\x00", "\x01", "\x02"}},
	})
	for _, mode := range [][]string{nil, {"--wide"}} {
		code, out, errOut := inspect(t, append(mode, file)...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", mode, code, errOut)
		}
		for _, want := range []string{`"\x00","\x01","\x02"`, `"\x00","\x01"`, `"c\a"`, `TTY="\x1b[31mred"`} {
			if !strings.Contains(out, want) {
				t.Errorf("%v: output lacks %s:\n%s", mode, want, out)
			}
		}
		for i, r := range out {
			if r != '\n' && !unicode.IsPrint(r) {
				t.Fatalf("%v: output holds the raw control character %q at byte %d:\n%q", mode, r, i, out)
			}
		}
	}
}

// TestInspectFitsTerminal: a checkpoint with long fields (a 64-device allocation, a long resource
// name, a long environment value) fits 100 columns by default, keeps every registered device ID
// (wrapped, not cut), says that cells were abbreviated, and --wide prints everything in full.
func TestInspectFitsTerminal(t *testing.T) {
	var ids []string
	for i := range 64 {
		ids = append(ids, fmt.Sprintf("GPU-%08x-aaaa-bbbb-cccc-%012d", i, i))
	}
	long := strings.Repeat("x", 300)
	resp, err := proto.Marshal(&pluginapi.ContainerAllocateResponse{Envs: map[string]string{"LONG": long}})
	if err != nil {
		t.Fatal(err)
	}
	res := "vendor.example.com/a-rather-long-resource-name-for-accelerators"
	file := writeCheckpoint(t, &checkpoint.Data{
		PodDeviceEntries: []checkpoint.PodDevicesEntry{{
			PodUID: "11111111-2222-4333-8444-000000000001", ContainerName: "trainer", ResourceName: res,
			DeviceIDs: checkpoint.DevicesPerNUMA{0: ids[:32], 1: ids[32:]}, AllocResp: resp,
		}},
		RegisteredDevices: map[string][]string{res: ids},
	})
	code, out, errOut := inspect(t, file)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, line := range strings.Split(out, "\n") {
		if n := utf8.RuneCountInString(line); n > 100 && !strings.HasPrefix(line, "file:") {
			t.Errorf("line of %d columns, want at most 100: %s", n, line)
		}
	}
	for _, id := range ids {
		if !strings.Contains(out, id) {
			t.Errorf("registered device %s lost by wrapping", id)
		}
	}
	if !strings.Contains(out, "--wide") || strings.Contains(out, long) {
		t.Errorf("default output should abbreviate the 300-character value and point at --wide:\n%s", out)
	}
	code, out, errOut = inspect(t, "--wide", file)
	if code != 0 {
		t.Fatalf("--wide: exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "LONG="+long) || !strings.Contains(out, strings.Join(ids[:32], ",")) || !strings.Contains(out, res) {
		t.Errorf("--wide does not print every field in full:\n%s", out)
	}
	if code, _, _ := inspect(t, "--width", "20", file); code != 2 {
		t.Errorf("--width 20: exit %d, want 2", code)
	}
}

// TestInspectReportsContestedDevices: a checkpoint whose entries name one device under two
// pods (records that disagreed when kdm recovered them) lists the device and both pods, in the
// table and in JSON; a checkpoint without such a device prints no such section.
func TestInspectReportsContestedDevices(t *testing.T) {
	entry := func(pod, id string) checkpoint.PodDevicesEntry {
		return checkpoint.PodDevicesEntry{PodUID: pod, ContainerName: "main", ResourceName: "nvidia.com/gpu",
			DeviceIDs: checkpoint.DevicesPerNUMA{0: {id}}, AllocResp: []byte{}}
	}
	file := writeCheckpoint(t, &checkpoint.Data{PodDeviceEntries: []checkpoint.PodDevicesEntry{
		entry("pod-a", "GPU-1"), entry("pod-b", "GPU-1"), entry("pod-b", "GPU-2"),
	}})
	for _, args := range [][]string{{file}, {"--wide", file}} {
		code, out, errOut := inspect(t, args...)
		if code != 0 {
			t.Fatalf("inspect %v: exit %d: %s", args, code, errOut)
		}
		if !strings.Contains(out, "CONTESTED: 1 devices") || !strings.Contains(out, "nvidia.com/gpu GPU-1: pods pod-a, pod-b") {
			t.Fatalf("inspect %v does not report GPU-1 contested by pod-a and pod-b:\n%s", args, out)
		}
	}
	code, out, _ := inspect(t, "--json", file)
	var got inspected
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || len(got.Contested) != 1 ||
		got.Contested[0].DeviceID != "GPU-1" || strings.Join(got.Contested[0].PodUIDs, ",") != "pod-a,pod-b" {
		t.Fatalf("--json contested = %+v (exit %d), want GPU-1 by pod-a and pod-b", got.Contested, code)
	}

	plain := writeCheckpoint(t, &checkpoint.Data{PodDeviceEntries: []checkpoint.PodDevicesEntry{entry("pod-a", "GPU-1")}})
	if _, out, _ := inspect(t, plain); strings.Contains(out, "CONTESTED") {
		t.Fatalf("a checkpoint without a contested device reports one:\n%s", out)
	}
}
