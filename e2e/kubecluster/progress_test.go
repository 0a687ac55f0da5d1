package kubecluster

import (
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a strings.Builder safe for the heartbeat goroutine and the test to share.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestBuildProgress: package paths from go build -v are counted, not copied; other lines
// (downloads, errors, a final line without a newline) pass through whole; a heartbeat with the
// elapsed time, the count and the last package comes every interval until stop, and none after.
func TestBuildProgress(t *testing.T) {
	var out syncBuffer
	p := startProgress(&out, 20*time.Millisecond)
	_, _ = p.Write([]byte("go: downloading k8s.io/kubernetes v1.36.3\nk8s.io/a\nk8s.io/b\nk8s.io/"))
	_, _ = p.Write([]byte("c\n./etcd/main.go:3:2: undefined: x\nexit status"))
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "still building") {
		if time.Now().After(deadline) {
			t.Fatalf("no heartbeat in 10s:\n%s", out.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := p.stop(); n != 3 {
		t.Errorf("stop says %d packages, want 3", n)
	}
	got := out.String()
	for _, want := range []string{
		"go: downloading k8s.io/kubernetes v1.36.3\n",
		"./etcd/main.go:3:2: undefined: x\n",
		"elapsed, 3 packages compiled, last k8s.io/c\n",
		"exit status\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	for _, pkg := range []string{"\nk8s.io/a\n", "\nk8s.io/b\n"} {
		if strings.Contains(got, pkg) {
			t.Errorf("package line %q was copied:\n%s", pkg, got)
		}
	}
	time.Sleep(60 * time.Millisecond)
	if after := out.String(); after != got {
		t.Errorf("heartbeat after stop:\n%s", strings.TrimPrefix(after, got))
	}
}

// TestBuildProgressNamesTotal: with the number of packages the build depends on, the
// heartbeat says how many of at most how many are compiled.
func TestBuildProgressNamesTotal(t *testing.T) {
	var out syncBuffer
	p := startProgress(&out, 20*time.Millisecond)
	p.setTotal(2000)
	_, _ = p.Write([]byte("k8s.io/a\nk8s.io/b\n"))
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "2 of at most 2000 packages compiled, last k8s.io/b") {
		if time.Now().After(deadline) {
			t.Fatalf("no heartbeat naming the total in 10s:\n%s", out.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	p.stop()
}
