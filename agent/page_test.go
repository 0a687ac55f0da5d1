package agent

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kdm-project/kdm/agent/podresult"
	"github.com/kdm-project/kdm/agent/statusapi"
	"github.com/kdm-project/kdm/devicemanager"
)

// testServer is the agent's HTTP server as the page tests reach it.
type testServer struct {
	URL    string
	client *http.Client
}

// Client is a client of the server whose connections end with the test.
func (s *testServer) Client() *http.Client { return s.client }

// pageServer serves a's HTTP API, the status page with it, on a loopback listener until the
// test ends.
func pageServer(t *testing.T, a *Agent) *testServer {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &testServer{URL: "http://" + serveHTTPForTest(t, a, statusapi.DefaultLimits, nil), client: &http.Client{Transport: tr}}
}

// stateStream reads PageStates pushed by /api/stream.
type stateStream struct {
	t      *testing.T
	states chan statusapi.PageState
}

func openStream(t *testing.T, srv *testServer) *stateStream {
	t.Helper()
	resp, err := srv.Client().Get(srv.URL + "/api/stream")
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("/api/stream Content-Type = %q, want text/event-stream", ct)
	}
	s := &stateStream{t: t, states: make(chan statusapi.PageState, 64)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(s.states)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var st statusapi.PageState
			if err := json.Unmarshal([]byte(data), &st); err != nil {
				t.Errorf("stream sent a state that is not statusapi.PageState JSON: %v", err)
				return
			}
			select {
			case s.states <- st:
			default: // the test reads only the latest states
				<-s.states
				s.states <- st
			}
		}
	}()
	t.Cleanup(func() { _ = resp.Body.Close(); <-done })
	return s
}

// next waits up to within for a pushed state satisfying cond.
func (s *stateStream) next(what string, within time.Duration, cond func(statusapi.PageState) bool) statusapi.PageState {
	s.t.Helper()
	timeout := time.After(within)
	var last statusapi.PageState
	for {
		select {
		case st, ok := <-s.states:
			if !ok {
				s.t.Fatalf("stream ended while waiting for %s", what)
			}
			last = st
			if cond(st) {
				return st
			}
		case <-timeout:
			b, _ := json.Marshal(last)
			s.t.Fatalf("no pushed state showed %s within %s; last: %s", what, within, b)
		}
	}
}

func resourceOf(st statusapi.PageState, name string) *statusapi.PageResource {
	for i := range st.Resources {
		if st.Resources[i].Name == name {
			return &st.Resources[i]
		}
	}
	return nil
}

func hasEvent(st statusapi.PageState, kind, subject string) bool {
	for _, e := range st.Events {
		if e.Kind == kind && (e.Resource == subject || e.Pod == subject) {
			return true
		}
	}
	return false
}

// TestStatusPageStreamsPluginLifecycle follows one plugin through the page's state stream:
// devices and their holder, the plugin's disconnect with the grace countdown and allocatable
// 0 pushed at once, and the resource's removal after the grace period, each in the timeline.
func TestStatusPageStreamsPluginLifecycle(t *testing.T) {
	f := newFixture(t)
	a, _ := f.runWith(Config{PodManifestPath: f.pods, GracePeriod: 4 * time.Second})
	p := f.plugin("dev-a", "dev-b", "dev-c")
	f.manifest("holder", 2)
	f.waitFor(a, "pod admitted", func(st statusapi.NodeStatus) bool {
		r := phase(st, "holder")
		return r != nil && r.Phase == podresult.PhaseAdmitted
	})
	srv := pageServer(t, a)
	s := openStream(t, srv)

	st := s.next("3 devices, 2 held by default/holder", 5*time.Second, func(st statusapi.PageState) bool {
		r := resourceOf(st, "example.com/gpu")
		if r == nil || r.Capacity != 3 || r.Allocatable != 3 || r.Endpoint.State != "Running" || len(r.Devices) != 3 {
			return false
		}
		held := 0
		for _, d := range r.Devices {
			if len(d.Holders) == 1 && d.Holders[0] == (statusapi.PageHolder{Pod: "default/holder", Container: "main"}) {
				held++
			}
		}
		return held == 2
	})
	for _, want := range [][2]string{{statusapi.EventStarted, ""}, {statusapi.EventRegistered, "example.com/gpu"}, {statusapi.EventAdmitted, "default/holder"}} {
		if !hasEvent(st, want[0], want[1]) {
			t.Errorf("timeline lacks a %s event for %q: %+v", want[0], want[1], st.Events)
		}
	}
	if len(st.Pods) != 1 || st.Pods[0].Phase != podresult.PhaseAdmitted || len(st.Pods[0].Containers[0].Devices["example.com/gpu"]) != 2 {
		t.Errorf("pods = %+v, want default/holder admitted with 2 devices", st.Pods)
	}

	p.Stop()
	stoppedAt := time.Now()
	st = s.next("the endpoint stopped with a countdown and allocatable 0", 2*time.Second, func(st statusapi.PageState) bool {
		r := resourceOf(st, "example.com/gpu")
		return r != nil && r.Endpoint.State == "Stopped" && r.Allocatable == 0 && r.Capacity == 3 &&
			r.Endpoint.GraceRemainingMs > 0 && r.Endpoint.GraceRemainingMs <= 4000
	})
	t.Logf("stop shown after %s", time.Since(stoppedAt))
	if !hasEvent(st, statusapi.EventDisconnected, "example.com/gpu") {
		t.Errorf("timeline lacks the disconnect: %+v", st.Events)
	}
	for _, d := range resourceOf(st, "example.com/gpu").Devices {
		if d.Health != devicemanager.DeviceUnhealthy {
			t.Errorf("device %s is %s after the plugin stopped, want Unhealthy", d.ID, d.Health)
		}
	}

	st = s.next("the resource removed after the grace period", 10*time.Second, func(st statusapi.PageState) bool {
		r := resourceOf(st, "example.com/gpu")
		return r != nil && r.Endpoint.State == statusapi.EndpointRemoved && r.Endpoint.RemovedAt != nil &&
			hasEvent(st, statusapi.EventRemoved, "example.com/gpu")
	})
	if r := resourceOf(st, "example.com/gpu"); r.Allocatable != 0 {
		t.Errorf("removed resource allocatable = %d, want 0", r.Allocatable)
	}
}

// TestStatusPageServesAssets checks the page and its assets come from the binary with
// headers that keep it to its own origin, and that only the page's paths are served.
func TestStatusPageServesAssets(t *testing.T) {
	f := newFixture(t)
	a, _ := f.run()
	srv := pageServer(t, a)
	for _, c := range []struct {
		path, contentType, contains string
		code                        int
	}{
		{"/", "text/html; charset=utf-8", `<script src="/ui/app.js"`, http.StatusOK},
		{"/ui/app.js", "text/javascript; charset=utf-8", "EventSource", http.StatusOK},
		{"/ui/style.css", "text/css; charset=utf-8", ".grid.compact", http.StatusOK},
		{"/api/state", "application/json", `"resources":[]`, http.StatusOK},
		{"/nope", "", "", http.StatusNotFound},
		{"/ui/missing.js", "", "", http.StatusNotFound},
	} {
		resp, err := srv.Client().Get(srv.URL + c.path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != c.code {
			t.Errorf("GET %s: %d, want %d", c.path, resp.StatusCode, c.code)
			continue
		}
		if c.code != http.StatusOK {
			continue
		}
		if got := resp.Header.Get("Content-Type"); got != c.contentType {
			t.Errorf("GET %s: Content-Type %q, want %q", c.path, got, c.contentType)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
			t.Errorf("GET %s: Content-Security-Policy %q does not keep the page to its origin", c.path, csp)
		}
		if !strings.Contains(string(body), c.contains) {
			t.Errorf("GET %s: body lacks %q", c.path, c.contains)
		}
	}
}

// TestStatusPageEventLog covers the timeline's rules without an agent: one event per phase
// change, the ring's bound, and endpoint changes found by comparing snapshots.
func TestStatusPageEventLog(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	l := newEventLog(func() time.Time { return now })
	r := &podresult.PodResult{Namespace: "ns", Name: "p", UID: types.UID("u1"), Phase: podresult.PhasePending, Message: "waits"}
	l.podWaiting(r.UID, "main", "example.com/gpu", now.Add(time.Minute))
	l.podRecorded(r)
	l.podRecorded(r) // a repeated phase (a health refresh) adds nothing
	if w, ok := l.waitOf(r.UID); !ok || w.Resource != "example.com/gpu" {
		t.Errorf("waitOf = %+v, %v; want the noted wait", w, ok)
	}
	admitted := *r
	admitted.Phase = podresult.PhaseAdmitted
	l.podRecorded(&admitted)
	if _, ok := l.waitOf(r.UID); ok {
		t.Error("an admitted pod still has a wait")
	}
	l.podRemoved(r.UID, "ns", "p")
	l.podRemoved(r.UID, "ns", "p") // already gone: no second event
	var kinds []string
	for _, e := range l.recent() {
		kinds = append(kinds, e.Kind)
	}
	if got, want := strings.Join(kinds, ","), "PodRemoved,Admitted,Waiting"; got != want {
		t.Errorf("timeline kinds (newest first) = %s, want %s", got, want)
	}

	running := func(instance string, health ...string) devicemanager.ResourceView {
		v := devicemanager.ResourceView{Name: "r", Endpoint: devicemanager.EndpointView{
			State: devicemanager.EndpointRunning, Socket: "s", Instance: instance, Listed: true}}
		for i, h := range health {
			v.Devices = append(v.Devices, devicemanager.DeviceView{ID: fmt.Sprint(i), Health: h})
		}
		return v
	}
	stopped := running("1", "Unhealthy")
	stopped.Endpoint.State = devicemanager.EndpointStopped
	unlisted := running("2", "Unhealthy") // connected, its first list not in yet
	unlisted.Endpoint.Listed = false
	steps := []struct {
		views []devicemanager.ResourceView
		want  string // kinds added by the step, oldest first
	}{
		{[]devicemanager.ResourceView{running("1", "Healthy")}, "Registered"},
		{[]devicemanager.ResourceView{running("1", "Healthy")}, ""},
		{[]devicemanager.ResourceView{running("1", "Unhealthy")}, "Health"},
		{[]devicemanager.ResourceView{stopped}, "Disconnected"},
		{[]devicemanager.ResourceView{unlisted}, "Registered"},
		{[]devicemanager.ResourceView{running("2", "Healthy")}, ""}, // its first list is no health change
		{[]devicemanager.ResourceView{running("2", "Unhealthy")}, "Health"},
		{[]devicemanager.ResourceView{running("3", "Healthy")}, "Registered"}, // replaced while running
		{nil, "Removed"},
		{nil, ""},
	}
	for i, step := range steps {
		before := len(l.recent())
		l.observe(step.views, time.Minute)
		events := l.recent()
		var added []string
		for j := len(events) - before - 1; j >= 0; j-- {
			added = append(added, events[j].Kind)
		}
		if got := strings.Join(added, ","); got != step.want {
			t.Errorf("step %d added %q, want %q", i, got, step.want)
		}
	}
	if _, ok := l.removedResources()["r"]; !ok {
		t.Error("removed resource not remembered")
	}
	l.observe([]devicemanager.ResourceView{running("4", "Healthy")}, time.Minute)
	if _, ok := l.removedResources()["r"]; ok {
		t.Error("a resource that registered again is still listed as removed")
	}

	for i := 0; i < 2*maxEvents; i++ {
		l.started(i)
	}
	events := l.recent()
	if len(events) != maxEvents || events[0].Message != fmt.Sprintf("kdm restarted; %d containers of the previous run keep their devices", 2*maxEvents-1) {
		t.Errorf("after %d events: %d kept, newest %q", 2*maxEvents, len(events), events[0].Message)
	}
}

// TestStatusPageWaitingPod: under the kdm policy a pod whose plugin has not registered yet is
// shown waiting, with the resource, the container and the time left, until the plugin comes.
func TestStatusPageWaitingPod(t *testing.T) {
	f := newFixture(t)
	a, _ := f.runWith(Config{PodManifestPath: f.pods, Policy: devicemanager.KDMPolicy()})
	f.manifest("early", 1)
	s := openStream(t, pageServer(t, a))
	st := s.next("the pod waiting for example.com/gpu", 10*time.Second, func(st statusapi.PageState) bool {
		return len(st.Pods) == 1 && st.Pods[0].Phase == podresult.PhasePending && st.Pods[0].Waiting != nil
	})
	w := st.Pods[0].Waiting
	timeout := devicemanager.KDMPolicy().DeferAdmissionTimeout
	if w.Resource != "example.com/gpu" || w.Container != "main" || w.RemainingMs <= 0 || w.RemainingMs > timeout.Milliseconds() {
		t.Errorf("waiting = %+v, want container main waiting for example.com/gpu with at most %s left", w, timeout)
	}
	if !hasEvent(st, statusapi.EventWaiting, "default/early") {
		t.Errorf("timeline lacks the wait: %+v", st.Events)
	}
	f.plugin("g0")
	st = s.next("the pod admitted once the plugin registered", 10*time.Second, func(st statusapi.PageState) bool {
		return len(st.Pods) == 1 && st.Pods[0].Phase == podresult.PhaseAdmitted
	})
	if st.Pods[0].Waiting != nil {
		t.Errorf("an admitted pod still shows a wait: %+v", st.Pods[0].Waiting)
	}
}
