package e2e

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"k8s.io/apimachinery/pkg/types"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/agent/podresult"
	"github.com/kdm-project/kdm/agent/statusapi"
	"github.com/kdm-project/kdm/deviceplugin"
	"github.com/kdm-project/kdm/deviceplugin/plugintest"
	"github.com/kdm-project/kdm/podresources/podresourcestest"
)

// shutdownBound is how long a SIGTERMed kdm may take to exit in these tests: the podresources
// and HTTP servers each wait at most 5 s for their clients, so a clean stop fits well within it.
const shutdownBound = 15 * time.Second

// terminateWithin sends SIGTERM to p and requires exit status 0 within shutdownBound.
func terminateWithin(t *testing.T, p *process) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	bound := time.NewTimer(shutdownBound)
	defer bound.Stop()
	select {
	case <-p.done:
		if code := p.cmd.ProcessState.ExitCode(); code != 0 {
			t.Fatalf("%s exited with status %d after SIGTERM, want 0", p.name, code)
		}
	case <-bound.C:
		t.Fatalf("%s did not exit within %v of SIGTERM", p.name, shutdownBound)
	}
}

// stallPodResources connects to the podresources socket as an HTTP/2 client that announces a
// zero stream receive window, starts a v1 List on each of streams streams, waits until the
// server has answered every stream's headers (so each call reached its handler and the
// response is stuck behind flow control), and from then on never reads and never sends
// WINDOW_UPDATE. The connection is closed when the test ends.
func stallPodResources(t *testing.T, sock string, streams int) {
	t.Helper()
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatalf("dialing podresources %s: %v", sock, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	fr, err := podresourcestest.StartStalledLists(conn, streams)
	if err != nil {
		t.Fatalf("stalling podresources: %v", err)
	}
	// The response headers are not flow controlled; the message behind them is.
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	answered := map[uint32]bool{}
	for len(answered) < streams {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("podresources answered %d of %d stalled streams' headers: %v", len(answered), streams, err)
		}
		switch f := f.(type) {
		case *http2.HeadersFrame:
			answered[f.StreamID] = true
		case *http2.RSTStreamFrame:
			t.Fatalf("podresources reset stream %d (%v) before the test stalled it", f.StreamID, f.ErrCode)
		case *http2.GoAwayFrame:
			t.Fatalf("podresources sent GOAWAY (%v) before the test stalled it", f.ErrCode)
		}
	}
	_ = conn.SetReadDeadline(time.Time{})
}

// TestShutdownWithStalledPodResourcesClients: podresources clients that never accept their
// responses cannot keep SIGTERM from stopping kdm cleanly, and the stop leaves the checkpoint
// and the pod's result intact.
func TestShutdownWithStalledPodResourcesClients(t *testing.T) {
	innerLoopSkips(t, "waits out stalled podresources clients at shutdown")
	n := newNode(t)
	kdm := n.startServing("8 GPUs")
	n.writePod("steady", 2)
	st := n.eventually("steady admitted", admitted("steady", 2))
	held := sorted(visible(pod(st, "steady")))

	sock := filepath.Join(n.rootDir, "pod-resources", "kubelet.sock")
	for range 3 {
		stallPodResources(t, sock, 4)
	}
	start := time.Now()
	terminateWithin(t, kdm)
	t.Logf("kdm stopped %v after SIGTERM", time.Since(start).Round(time.Millisecond))

	n.expectCheckpointHolds(map[string][]string{"steady": held})
	results, err := podresult.ReadDir(resultsDir(n.rootDir))
	if err != nil {
		t.Fatalf("reading pods/*.json after the stop: %v", err)
	}
	r := results[types.UID(uidOf("steady"))]
	if r == nil || r.Phase != podresult.PhaseAdmitted || !slices.Equal(sorted(visible(r)), held) {
		t.Fatalf("pods/*.json after the stop says %+v, want steady admitted with %v", r, held)
	}
}

// TestShutdownDuringAllocate: an Allocate in flight when kdm gets SIGTERM is abandoned, not
// recorded as a rejection, and the next kdm admits the pod once the plugin answers. Under
// kubelet-1.36 a pod seen before its plugin re-registers is rejected (the kubelet's own
// behaviour), so there the manifest is held back until the plugin is back; under kdm deferred
// admission waits for the plugin.
func TestShutdownDuringAllocate(t *testing.T) {
	for _, policy := range []string{"kubelet-1.36", "kdm"} {
		t.Run(policy, func(t *testing.T) { shutdownDuringAllocate(t, policy) })
	}
}

func shutdownDuringAllocate(t *testing.T, policy string) {
	const resource = "example.com/slow"
	n := newNode(t)
	plugin, err := plugintest.New(deviceplugin.Config{
		ResourceName:    resource,
		PluginDir:       n.pluginDir,
		Devices:         []*pluginapi.Device{{ID: "slow0", Health: pluginapi.Healthy}, {ID: "slow1", Health: pluginapi.Healthy}},
		KeepRegistering: true,
		RetryBackoff:    50 * time.Millisecond,
		MaxRetryBackoff: 500 * time.Millisecond,
	}, plugintest.RecordRequests()) // WaitForCalls below reads the Allocate requests
	if err != nil {
		t.Fatal(err)
	}
	plugin.SetFaults(plugintest.Faults{HangAllocate: true})
	kdm := n.startKdm("--policy", policy)
	// kdm's start-up cleanup is over once it serves /status; a plugin started earlier would
	// register twice, and the second registration would end the first one's Allocate.
	n.eventually("kdm serving", func(statusapi.NodeStatus) bool { return true })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := plugin.Start(ctx); err != nil {
		t.Fatalf("starting the plugin: %v", err)
	}
	t.Cleanup(plugin.Stop)
	slowDevices := func(st statusapi.NodeStatus) bool { return st.Allocatable[resource] == 2 }
	n.eventually("2 slow devices", slowDevices)

	n.writeResourcePod("waiting", resource, 1)
	if err := plugin.WaitForCalls(ctx, func(c plugintest.Calls) bool { return len(c.Allocate) > 0 }); err != nil {
		t.Fatalf("waiting for kdm's Allocate: %v", err)
	}
	terminateWithin(t, kdm)

	results, err := podresult.ReadDir(resultsDir(n.rootDir))
	if err != nil {
		t.Fatalf("reading pods/*.json after the stop: %v", err)
	}
	for _, r := range results {
		if r.Phase == podresult.PhaseRejected {
			t.Fatalf("pods/*.json records pod %s, whose Allocate SIGTERM cancelled, as rejected: %s: %s", r.Name, r.Reason, r.Message)
		}
	}

	plugin.SetFaults(plugintest.Faults{})
	manifest := filepath.Join(n.manifests, "waiting.yaml")
	aside := filepath.Join(n.base, "waiting.yaml")
	if policy == "kubelet-1.36" {
		if err := os.Rename(manifest, aside); err != nil {
			t.Fatal(err)
		}
	}
	kdm = n.startKdm("--policy", policy)
	n.eventually("the plugin registered again", slowDevices)
	if policy == "kubelet-1.36" {
		if err := os.Rename(aside, manifest); err != nil {
			t.Fatal(err)
		}
	}
	st := n.eventually("waiting decided after the restart", decided("waiting"))
	if p := pod(st, "waiting"); p.Phase != podresult.PhaseAdmitted {
		t.Fatalf("after the restart the pod is %s (%s: %s), want %s", p.Phase, p.Reason, p.Message, podresult.PhaseAdmitted)
	}
	terminateWithin(t, kdm)
}
