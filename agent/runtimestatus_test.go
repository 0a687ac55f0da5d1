package agent

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kdm-project/kdm/agent/podresult"
	"github.com/kdm-project/kdm/agent/statusapi"
)

// TestAdmissionOnlySaysNoContainersRun: without a container runtime, the pod result, /status
// and the page all say plainly that no containers run.
func TestAdmissionOnlySaysNoContainersRun(t *testing.T) {
	f := newFixture(t)
	a, _ := f.run()
	f.plugin("g0")
	f.waitFor(a, "1 device", func(st statusapi.NodeStatus) bool { return st.Allocatable["example.com/gpu"] == 1 })
	f.manifest("only", 1)
	st := f.waitFor(a, "only admitted", func(st statusapi.NodeStatus) bool {
		p := phase(st, "only")
		return p != nil && p.Phase == podresult.PhaseAdmitted
	})

	says := func(where string, containersRun bool, message string) {
		t.Helper()
		if containersRun || !strings.Contains(message, "no containers run") {
			t.Errorf("%s: containersRun %v, message %q; want false and a message saying no containers run", where, containersRun, message)
		}
	}
	says("/status", st.Runtime.ContainersRun, st.Runtime.Message)
	page := a.PageState()
	says("the page", page.Runtime.ContainersRun, page.Runtime.Message)
	r := phase(st, "only")
	if r.Runtime == nil {
		t.Fatal("the pod result has no runtime part")
	}
	says("the pod result", r.Runtime.ContainersRun, r.Runtime.Message)

	b, err := os.ReadFile(podresult.Path(filepath.Join(f.root, "kdm", "pods"), podresult.PodOf(r)))
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Runtime *struct {
			ContainersRun *bool  `json:"containersRun"`
			Message       string `json:"message"`
		} `json:"runtime"`
	}
	if err := json.Unmarshal(b, &file); err != nil {
		t.Fatal(err)
	}
	if file.Runtime == nil || file.Runtime.ContainersRun == nil {
		t.Fatalf("the result file has no runtime.containersRun: %s", b)
	}
	says("the result file", *file.Runtime.ContainersRun, file.Runtime.Message)
}
