package e2e

import (
	"context"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/agent/podresult"
	"github.com/kdm-project/kdm/agent/statusapi"
	"github.com/kdm-project/kdm/deviceplugin"
	"github.com/kdm-project/kdm/deviceplugin/plugintest"
)

// TestHangingAllocateDelaysNoOtherResource: while one resource's plugin hangs in Allocate, a
// pod asking for another resource (the mock GPUs of a real kdm-nvml-plugin process) is
// admitted, and the hanging pod is still undecided when it is. Under kubelet-1.36 there is no
// Allocate deadline, so only the plugin stopping ends the hang.
func TestHangingAllocateDelaysNoOtherResource(t *testing.T) {
	forEachPolicy(t, func(t *testing.T, n *node, policy string) {
		const slow = "example.com/slow"
		plugin, err := plugintest.New(deviceplugin.Config{
			ResourceName:    slow,
			PluginDir:       n.pluginDir,
			Devices:         []*pluginapi.Device{{ID: "slow0", Health: pluginapi.Healthy}},
			KeepRegistering: true,
			RetryBackoff:    50 * time.Millisecond,
			MaxRetryBackoff: 500 * time.Millisecond,
		}, plugintest.RecordRequests()) // WaitForCalls below reads the Allocate requests
		if err != nil {
			t.Fatal(err)
		}
		plugin.SetFaults(plugintest.Faults{HangAllocate: true})
		kdm := n.startWithGPUs(policy)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := plugin.Start(ctx); err != nil {
			t.Fatalf("starting the hanging plugin: %v", err)
		}
		t.Cleanup(plugin.Stop)
		n.eventually("the slow resource", func(st statusapi.NodeStatus) bool { return st.Allocatable[slow] == 1 })

		n.writeResourcePod("stuck", slow, 1)
		if err := plugin.WaitForCalls(ctx, func(c plugintest.Calls) bool { return len(c.Allocate) > 0 }); err != nil {
			t.Fatalf("waiting for kdm's Allocate: %v", err)
		}
		n.writePod("probe", 1)
		st := n.eventually("probe decided while stuck's Allocate hangs", decided("probe"))
		if p := pod(st, "probe"); p.Phase != podresult.PhaseAdmitted || len(visible(p)) != 1 {
			t.Fatalf("probe is %s (%s: %s) with %v, want admitted with 1 GPU", p.Phase, p.Reason, p.Message, visible(p))
		}
		if decided("stuck")(st) {
			t.Fatalf("stuck was decided before probe: the hang ended too early for the test to mean anything")
		}
		plugin.Stop()
		n.eventually("stuck decided once its plugin stopped", decided("stuck"))
		kdm.terminate(t)
	})
}
