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
