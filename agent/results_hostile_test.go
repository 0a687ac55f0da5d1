package agent

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/kdm-project/kdm/agent/podresult"
)

// TestUnusableResultsAreReported: pod results that cannot be used (not JSON, no UID, a FIFO, a
// symbolic link) are skipped at start with a line naming each file; the agent still starts,
// never blocks on the FIFO, and keeps the good result: a rejected pod whose manifest is still
// there, and which stays rejected (a removed pod's result would be dropped).
func TestUnusableResultsAreReported(t *testing.T) {
	f := newFixture(t)
	pods := filepath.Join(f.root, "kdm", "pods")
	if err := os.MkdirAll(pods, 0o750); err != nil {
		t.Fatal(err)
	}
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(pods, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("default_good_uid-good.json", `{"namespace":"default","name":"good","uid":"uid-good","phase":"Rejected"}`)
	write("garbage.json", "{not json")
	write("nouid.json", `{"name":"x"}`)
	if err := syscall.Mkfifo(filepath.Join(pods, "fifo.json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/hostname", filepath.Join(pods, "link.json")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.pods, "good.yaml"), []byte(manifestBody("good", "uid-good", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	_, logs := f.runLogged(Config{PodManifestPath: f.pods})
	f.waitLog(logs, "Skipped a pod result that cannot be used",
		"garbage.json", "nouid.json: no pod UID", "fifo.json: not a regular file (a named pipe)", "link.json",
		"Pod was rejected before a restart; it stays rejected")
	results, err := podresult.ReadDir(pods)
	if err != nil || len(results) != 1 || results["uid-good"] == nil {
		t.Fatalf("ReadDir = %v, %v; want only the good result", results, err)
	}
}
