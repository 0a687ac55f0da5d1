package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

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
