package e2e

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2/ktesting"

	"github.com/kdm-project/kdm/agent/podresult"
	"github.com/kdm-project/kdm/agent/statusapi"
)

// fixedPage is a statusapi.Source serving one node state: ml/done finished (its runtime phase
// Succeeded) and released the two GPUs its record names, one of which ml/next now holds.
type fixedPage struct{ st statusapi.PageState }

func (f fixedPage) Status() statusapi.NodeStatus    { return statusapi.NodeStatus{} }
func (f fixedPage) PageState() statusapi.PageState  { return f.st }
func (f fixedPage) Checks() []statusapi.HealthCheck { return nil }
func (f fixedPage) PageChanges() <-chan struct{}    { return nil }

func releasedGPUsState() statusapi.PageState {
	gpu0, gpu1, gpu2 := mockGPUID(0), mockGPUID(1), mockGPUID(2)
	return statusapi.PageState{Node: "first-paint", Time: time.Now(), Policy: "kdm",
		Resources: []statusapi.PageResource{{Name: gpuResource, Capacity: 3, Allocatable: 3, Free: 2,
			Endpoint: statusapi.PageEndpoint{State: "Running"},
			Devices: []statusapi.PageDevice{
				{ID: gpu0, Health: "Healthy", Holders: []statusapi.PageHolder{{Pod: "ml/next", Container: "main"}}},
				{ID: gpu1, Health: "Healthy"}, {ID: gpu2, Health: "Healthy"},
			}}},
		Pods: []statusapi.PagePod{
			{Namespace: "ml", Name: "done", UID: "uid-done", Phase: podresult.PhaseAdmitted, RuntimePhase: "Succeeded",
				Containers: []statusapi.PageContainer{{Name: "main", State: "exited 0", Devices: map[string][]string{gpuResource: {gpu0, gpu1}}}}},
			{Namespace: "ml", Name: "next", UID: "uid-next", Phase: podresult.PhaseAdmitted, RuntimePhase: "Running",
				Containers: []statusapi.PageContainer{{Name: "main", State: "running", Devices: map[string][]string{gpuResource: {gpu0}}}}},
		},
		Runtime: statusapi.RuntimeInfo{ContainersRun: true, Message: "containers run by containerd"}}
}

// mockGPUID is the go-nvml mock's GPU UUID of index i.
func mockGPUID(i int) string { return "GPU-a100a100-0000-4000-8000-00000000000" + string(rune('0'+i)) }

// TestStatusPageFirstPaint: the page shows the node from the state it was served with, with
// /api/stream and /api/state blocked: its first paint needs no round trip, and never shows
// "Waiting for the first state…". A finished pod's card lists only the GPUs it still holds
// (none) and counts the released ones, never a GPU that another pod now holds.
func TestStatusPageFirstPaint(t *testing.T) {
	if testing.Short() {
		t.Skip("drives headless Chromium; run by make test")
	}
	b := newBrowser(t, 1280, 900, 60*time.Second)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- statusapi.Serve(ctx, lis, fixedPage{releasedGPUsState()},
			statusapi.Options{Registry: prometheus.NewRegistry(), Logger: ktesting.NewLogger(t, ktesting.NewConfig())})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("statusapi.Serve: %v", err)
		}
	})
	addr := lis.Addr().String()
	block := func(path string) *network.BlockPattern {
		return &network.BlockPattern{URLPattern: "http://" + addr + path, Block: true}
	}
	b.do(chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		if _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{}); err != nil {
			return err
		}
		_, err := chromedp.Call(ctx, network.SetBlockedURLs, network.SetBlockedURLsParams{
			URLPatterns: []*network.BlockPattern{block("/api/stream"), block("/api/state")}})
		return err
	}))
	// Navigate returns at the load event, after the deferred app.js ran: what the page shows
	// now came with it.
	b.do(chromedp.Navigate("http://" + addr + "/"))
	v, err := b.view()
	if err != nil {
		t.Fatal(err)
	}
	if v.Capacity != "3" || len(v.Devices) != 3 || v.Policy != "policy kdm" {
		t.Errorf("the page's first state shows capacity %q, %d devices and %q; want 3, 3 and \"policy kdm\"", v.Capacity, len(v.Devices), v.Policy)
	}
	text, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.body.innerText`))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(text, "Waiting for the first state") {
		t.Errorf("the page waits for a state it was served with:\n%s", text)
	}
	done, next := v.pod("ml/done"), v.pod("ml/next")
	if strings.Contains(done.Text, "0000000000") || !strings.Contains(done.Text, "2 released") {
		t.Errorf("the finished pod's card reads %q; want no GPU ID listed and \"2 released\"", done.Text)
	}
	if !strings.Contains(next.Text, "000000000000") || strings.Contains(next.Text, "released") {
		t.Errorf("the running pod's card reads %q; want its GPU listed and nothing released", next.Text)
	}
}
