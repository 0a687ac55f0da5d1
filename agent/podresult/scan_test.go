package podresult

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// paddedResult is the JSON of an admitted result for pod name whose message pads the file to
// size bytes.
func paddedResult(name string, size int) []byte {
	head := fmt.Sprintf(`{"namespace":"x","name":%q,"uid":"uid-%s","phase":"Admitted","message":"`, name, name)
	tail := `"}`
	return []byte(head + strings.Repeat("A", size-len(head)-len(tail)) + tail)
}

// TestScanBounds: a results directory holding files far larger than kdm writes reads only what
// the bounds allow. A file over MaxFileSize is refused on its size, files just under it are
// read until MaxScanBytes is spent and the rest refused, and the results kdm wrote, a few KiB
// each, are all read whatever their names, because the smallest files go first. Each refusal
// names the file and why.
func TestScanBounds(t *testing.T) {
	dir := t.TempDir()
	want := schemaFixture(t)
	if err := Write(dir, PodOf(want), want); err != nil {
		t.Fatal(err)
	}
	write := func(name string, data []byte) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("0-huge.json", paddedResult("huge", MaxFileSize+1))
	// Near-limit files that are not JSON: reading one costs the budget what a result of its
	// size would, and the decoder gives up at the first byte, which keeps the test quick.
	near := MaxScanBytes/(MaxFileSize-1024) + 4 // more than the budget takes
	for i := range near {
		write(fmt.Sprintf("0-near-%03d.json", i), []byte("x"+strings.Repeat(" ", MaxFileSize-1025)))
	}
	read := 0
	var got *PodResult
	skipped, err := Scan(dir, func(r *PodResult) {
		read++
		if r.UID == want.UID {
			got = r
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if got == nil {
		t.Fatalf("the result kdm wrote was not read (%d read, skipped: %v)", read, skipped)
	}
	assertSameResult(t, got, want)
	var tooLarge, undecodable, overBudget int
	for _, err := range skipped {
		switch msg := err.Error(); {
		case strings.Contains(msg, "0-huge.json") && strings.Contains(msg, fmt.Sprintf("more than the %d a result may have", MaxFileSize)):
			tooLarge++
		case strings.Contains(msg, "0-near-") && strings.Contains(msg, "not read: the results read before it took"):
			overBudget++
		case strings.Contains(msg, "0-near-") && strings.Contains(msg, "invalid character 'x'"):
			undecodable++
		default:
			t.Errorf("unexpected refusal: %v", err)
		}
	}
	if limit := MaxScanBytes / (MaxFileSize - 1024); undecodable > limit {
		t.Fatalf("%d near-limit files read, more than the %d the %d-byte budget allows", undecodable, limit, MaxScanBytes)
	}
	if tooLarge != 1 || overBudget == 0 || read != 1 || undecodable+overBudget != near {
		t.Fatalf("%d refused as too large (want 1), %d read and %d refused over the budget of %d near-limit files, %d results read (want 1)",
			tooLarge, undecodable, overBudget, near, read)
	}
}

// TestWriteRefusesOversized: a result whose file would exceed MaxFileSize is not written (a
// start would refuse it) and the pod's previous file stays.
func TestWriteRefusesOversized(t *testing.T) {
	dir := t.TempDir()
	r := schemaFixture(t)
	if err := Write(dir, PodOf(r), r); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(Path(dir, PodOf(r)))
	if err != nil {
		t.Fatal(err)
	}
	big := *r
	big.Message = strings.Repeat("m", MaxFileSize)
	err = Write(dir, PodOf(&big), &big)
	if err == nil || !strings.Contains(err.Error(), "ml/training") || !strings.Contains(err.Error(), fmt.Sprintf("more than the %d", MaxFileSize)) {
		t.Fatalf("Write of an oversized result = %v, want an error naming the pod and the limit", err)
	}
	after, err := os.ReadFile(Path(dir, PodOf(r)))
	if err != nil || string(after) != string(before) {
		t.Fatalf("the previous result changed (err %v)", err)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, tempPattern)); len(m) != 0 {
		t.Fatalf("temporary files left: %v", m)
	}
}

// TestScanManyFiles: past MaxScanFiles, the remaining files are reported unread in one error.
func TestScanManyFiles(t *testing.T) {
	if testing.Short() {
		t.Skip("creates MaxScanFiles files")
	}
	dir := t.TempDir()
	for i := range MaxScanFiles + 3 {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%05d.json", i)), []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	skipped, err := Scan(dir, func(*PodResult) { t.Fatal("an empty object is no result") })
	if err != nil {
		t.Fatal(err)
	}
	last := skipped[len(skipped)-1].Error()
	if len(skipped) != MaxScanFiles+1 || !strings.Contains(last, fmt.Sprintf("3 *.json files past the first %d were not read", MaxScanFiles)) {
		t.Fatalf("%d skipped, last %q; want %d unusable and one error for the 3 past the bound", len(skipped), last, MaxScanFiles)
	}
}
