package statusapi

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// fakeSource serves a fixed node: one resource, and a state that names how often it was
// taken, so that successive frames differ.
type fakeSource struct {
	mu    sync.Mutex
	taken int
}

func (s *fakeSource) Status() NodeStatus { return NodeStatus{} }

func (s *fakeSource) PageState() PageState {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.taken++
	return PageState{Node: fmt.Sprintf("state-%d", s.taken), Resources: []PageResource{{Name: "example.com/gpu"}}}
}

func (s *fakeSource) Checks() []HealthCheck { return nil }

func (s *fakeSource) PageChanges() <-chan struct{} { return nil }

// TestStateStreamsKeepOnlyTheLatest: a stream that has not taken its frame gets the newer one
// instead, never a queue; the bound counts open streams only.
func TestStateStreamsKeepOnlyTheLatest(t *testing.T) {
	s := newStateStreams(&fakeSource{}, clock.RealClock{}, klog.Background(), 2, time.Second)
	behind, err := s.subscribe()
	if err != nil {
		t.Fatal(err)
	}
	s.publish()
	fresh, err := s.subscribe()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.subscribe(); err == nil {
		t.Fatal("a third stream was served past a bound of 2")
	}
	s.publish()
	if len(behind.mailbox) != 1 || len(fresh.mailbox) != 1 {
		t.Fatalf("mailboxes hold %d and %d frames, want 1 each", len(behind.mailbox), len(fresh.mailbox))
	}
	if got, want := <-behind.mailbox, <-fresh.mailbox; string(got) != string(want) {
		t.Fatalf("the stream behind holds %q, want the latest frame %q", got, want)
	}
	s.unsubscribe(fresh)
	if _, err := s.subscribe(); err != nil {
		t.Fatalf("a stream after one ended: %v", err)
	}
}
