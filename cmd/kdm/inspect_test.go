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
	"k8s.io/apimachinery/pkg/types"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/agent/podresult"
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

// TestInspectUsage: more than one file is a usage error (exit 2) naming them; without a file,
// inspect reads the checkpoint under --root-dir; a missing file exits 1.
func TestInspectUsage(t *testing.T) {
	if code, _, errOut := inspect(t, "A", "B"); code != 2 || !strings.Contains(errOut, `kdm inspect: expected at most one checkpoint path, got 2: "A" "B"`) {
		t.Fatalf("two files: exit %d, %q; want 2 naming both", code, errOut)
	}
	root := t.TempDir()
	golden, err := os.ReadFile(filepath.Join(goldens, "2pods-init-app-2res", checkpoint.FileName))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "device-plugins"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "device-plugins", checkpoint.FileName), golden, 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := inspect(t, "--root-dir", root); code != 0 || !strings.Contains(out, "entries:  8") {
		t.Fatalf("no file, --root-dir %s: exit %d, stderr %q, stdout:\n%s", root, code, errOut, out)
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

// mockGPU is the go-nvml mock DGX A100's ID of GPU i: every ID shares all but the last digit.
func mockGPU(i int) string { return fmt.Sprintf("GPU-a100a100-0000-4000-8000-%012d", i) }

// writePodResult writes a pod result in kdm's format, with the fields that name the pod.
func writePodResult(t *testing.T, dir, namespace, name, uid string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(podresult.PodResult{Namespace: namespace, Name: name, UID: types.UID(uid), Phase: podresult.PhaseAdmitted})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, namespace+"_"+name+"_"+uid+".json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestInspectTellsDevicesAndPodsApart (issue 33): on a node of mock GPUs, whose IDs differ only
// in their last digit, the default table drops the prefix the IDs share (saying so once) rather
// than cutting off the digit that tells them apart, and names each pod namespace/name from
// kdm's pod results in <root-dir>/kdm/pods, found from the checkpoint's place in the kubelet's
// layout; a pod without a result keeps its UID. --wide and --json keep every ID in full. Golden.
func TestInspectTellsDevicesAndPodsApart(t *testing.T) {
	var all []string
	for i := range 8 {
		all = append(all, mockGPU(i))
	}
	resp := func(ids ...string) []byte {
		b, err := proto.Marshal(&pluginapi.ContainerAllocateResponse{Envs: map[string]string{"NVIDIA_VISIBLE_DEVICES": strings.Join(ids, ",")}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	const train, infer, orphan = "8d3f0c52-6a1e-4b7e-9f0a-1c2d3e4f5a01", "8d3f0c52-6a1e-4b7e-9f0a-1c2d3e4f5a02", "8d3f0c52-6a1e-4b7e-9f0a-1c2d3e4f5a09"
	data := &checkpoint.Data{
		PodDeviceEntries: []checkpoint.PodDevicesEntry{
			{PodUID: train, ContainerName: "trainer", ResourceName: "nvidia.com/gpu",
				DeviceIDs: checkpoint.DevicesPerNUMA{0: all[2:4], 1: all[4:6]}, AllocResp: resp(all[2:6]...)},
			{PodUID: infer, ContainerName: "server", ResourceName: "nvidia.com/gpu",
				DeviceIDs: checkpoint.DevicesPerNUMA{0: all[0:2]}, AllocResp: resp(all[0:2]...)},
			{PodUID: orphan, ContainerName: "main", ResourceName: "nvidia.com/gpu",
				DeviceIDs: checkpoint.DevicesPerNUMA{1: all[7:8]}, AllocResp: resp(all[7])},
		},
		RegisteredDevices: map[string][]string{"nvidia.com/gpu": all},
	}
	b, err := checkpoint.Encode(data)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	file := filepath.Join(root, "device-plugins", checkpoint.FileName)
	if err := os.MkdirAll(filepath.Dir(file), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	writePodResult(t, filepath.Join(root, "kdm", "pods"), "ml", "training", train)
	writePodResult(t, filepath.Join(root, "kdm", "pods"), "ml", "inference", infer)

	code, out, errOut := inspect(t, file)
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	checkGolden(t, "inspect/mock-gpus", strings.ReplaceAll(out, root, "ROOT"))
	for _, want := range []string{"pod ml/training (" + train + ")", "pod " + orphan + "\n", "numa 0: ~2,~3; numa 1: ~4,~5", "NVIDIA_VISIBLE_DEVICES=~0,~1"} {
		if !strings.Contains(out, want) {
			t.Errorf("the table lacks %q:\n%s", want, out)
		}
	}

	// The same pods are named from --pod-results-dir wherever the checkpoint lies.
	moved := filepath.Join(t.TempDir(), checkpoint.FileName)
	if err := os.WriteFile(moved, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, out, _ := inspect(t, "--pod-results-dir", filepath.Join(root, "kdm", "pods"), moved); !strings.Contains(out, "pod ml/inference ("+infer+")") {
		t.Errorf("--pod-results-dir does not name the pods:\n%s", out)
	}
	if _, out, _ := inspect(t, moved); strings.Contains(out, "ml/inference") {
		t.Errorf("a checkpoint outside the kubelet's layout names pods without --pod-results-dir:\n%s", out)
	}

	_, out, _ = inspect(t, "--wide", file)
	if !strings.Contains(out, "ml/training") || !strings.Contains(out, strings.Join(all[2:4], ",")) {
		t.Errorf("--wide lacks the pod name or the full IDs:\n%s", out)
	}
	_, out, _ = inspect(t, "--json", file)
	var got inspected
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	pods := map[string]string{}
	for _, e := range got.Entries {
		pods[e.PodUID] = e.Pod
	}
	if pods[train] != "ml/training" || pods[infer] != "ml/inference" || pods[orphan] != "" || !strings.Contains(out, `"`+all[7]+`"`) {
		t.Errorf("--json names pods %v, want ml/training, ml/inference and none for the orphan; IDs in full", pods)
	}
}

// TestCommonIDPrefix pins which prefixes are dropped: a long shared one, never the whole of
// an ID, never a short one such as real GPUs' "GPU-", never for one device or quoted IDs.
func TestCommonIDPrefix(t *testing.T) {
	for _, tc := range []struct {
		ids  []string
		want string
	}{
		{[]string{mockGPU(0), mockGPU(7)}, "GPU-a100a100-0000-4000-8000-00000000000"},
		{[]string{mockGPU(3), mockGPU(13)}, "GPU-a100a100-0000-4000-8000-0000000000"},
		{[]string{"GPU-3f2a9c1e-aaaa", "GPU-7b1d0e44-bbbb"}, ""},
		{[]string{mockGPU(1)}, ""},
		{[]string{mockGPU(1), mockGPU(1)}, ""},
		{[]string{"device-number-1", "device-number-10"}, "device-number-"},
		{[]string{"prefix-long-\x00", "prefix-long-\x01"}, ""},
	} {
		if got := commonIDPrefix(tc.ids); got != tc.want {
			t.Errorf("commonIDPrefix(%q) = %q, want %q", tc.ids, got, tc.want)
		}
	}
}
