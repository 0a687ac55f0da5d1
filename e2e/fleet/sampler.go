package fleet

import (
	"context"
	"sync"
	"time"
)

// Sample is the fleet once a second: pods Running and the apiserver's requests so far.
type Sample struct {
	// At is the time since the sampler started.
	At       time.Duration
	Running  int
	Requests float64 // apiserver_request_total, summed over every label
}

// Mark is a fault on the timeline, from Start to End since the sampler started.
type Mark struct {
	Name       string
	Start, End time.Duration
}

// Sampler records Samples every second and the faults' Marks; Stop ends it. Its methods are
// safe for concurrent use.
type Sampler struct {
	f      *Fleet
	t0     time.Time
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	samples []Sample
	marks   []Mark
}

// StartSampler starts sampling; the workload's pod watch must be running.
func (f *Fleet) StartSampler(ctx context.Context) *Sampler {
	ctx, cancel := context.WithCancel(ctx)
	s := &Sampler{f: f, t0: time.Now(), cancel: cancel, done: make(chan struct{})}
	go s.run(ctx)
	return s
}

func (s *Sampler) run(ctx context.Context) {
	defer close(s.done)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		at := time.Since(s.t0)
		sm := Sample{At: at, Running: s.f.Running(), Requests: -1}
		if m, err := s.f.scrape(ctx); err == nil {
			sm.Requests = m.requests.Total()
		}
		s.mu.Lock()
		s.samples = append(s.samples, sm)
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Begin marks the start of a fault and returns the function that marks its end.
func (s *Sampler) Begin(name string) (end func()) {
	s.mu.Lock()
	s.marks = append(s.marks, Mark{Name: name, Start: time.Since(s.t0), End: -1})
	i := len(s.marks) - 1
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		s.marks[i].End = time.Since(s.t0)
		s.mu.Unlock()
	}
}

// Stop ends sampling and returns what was recorded.
func (s *Sampler) Stop() ([]Sample, []Mark) {
	s.cancel()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Sample(nil), s.samples...), append([]Mark(nil), s.marks...)
}
