package explore

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestParseStoryRejectsBadStories: a story the explorer cannot run is refused at once with
// the file and line, rather than run with the bad command silently doing nothing.
func TestParseStoryRejectsBadStories(t *testing.T) {
	for _, tc := range []struct{ line, want string }{
		{"pod admit p1 gpu", `story.txt:1: pod p1: bad pod argument "gpu"`},
		{"pod admit p1 init=gpu:1", `story.txt:1: pod p1: a pod needs an app container`},
		{"pod admit p1 gpu=-1", `story.txt:1: pod p1: bad count in "gpu:-1"`},
		{"pod admit", "story.txt:1: pod admit needs a pod name"},
		{"plugin start gpu devices=x", `story.txt:1: plugin gpu: bad argument "devices=x" (want devices=N)`},
		{"plugin stop", "story.txt:1: plugin stop needs a plugin name"},
		{"advance soon", `story.txt:1: time: invalid duration "soon"`},
		{"checkpoint legacy-v1 missing.json", "story.txt:1: open "},
		{"kubelet dance", `story.txt:1: explore does not know "kubelet dance"`},
	} {
		path := filepath.Join(t.TempDir(), "story.txt")
		if err := os.WriteFile(path, []byte(tc.line+"\n----\n\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := ParseStory(path)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one containing %q", tc.line, err, tc.want)
		}
	}
}

// TestScriptWritesCrashDuringAllocate: a run in which the manager restarts while a pod's
// first Allocate is in flight is printed with the scenario language's crash=allocate, and
// the script, read back as a story, crashes at the same point.
func TestScriptWritesCrashDuringAllocate(t *testing.T) {
	steps := []Step{
		{Event: &Event{Kind: "plugin-start", Name: "gpu", Args: []string{"devices=2"}}},
		{Event: &Event{Kind: "pod-admit", Name: "p1", Args: []string{"gpu=1"}}},
		{Task: "admit p1"}, // selects p1's device: the plugin's Allocate is next
		{Event: &Event{Kind: "kubelet-restart", crash: true}},
	}
	w := newWorld(policyOf(t, "kdm"), true)
	for _, s := range steps {
		w.exec(s)
	}
	script := Script(steps, "test", nil)
	if !strings.Contains(script, "pod admit p1 gpu=1 crash=allocate\n") || strings.Contains(script, "kubelet restart") {
		t.Fatalf("script does not write the crash into the admission:\n%s", script)
	}
	path := filepath.Join(t.TempDir(), "crash.txt")
	if err := os.WriteFile(path, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	story, err := ParseStory(path)
	if err != nil {
		t.Fatal(err)
	}
	replayed := newWorld(policyOf(t, "kdm"), true)
	for _, e := range story {
		replayed.apply(e)
	}
	if replayed.gen != w.gen || replayed.pods["p1"].phase != w.pods["p1"].phase {
		t.Fatalf("replayed story: generation %d, p1 %v; the run: generation %d, p1 %v", replayed.gen, replayed.pods["p1"].phase, w.gen, w.pods["p1"].phase)
	}
}
