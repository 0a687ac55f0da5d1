package agent

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/agent/podresult"
	"github.com/kdm-project/kdm/agent/statusapi"
	"github.com/kdm-project/kdm/deviceplugin"
)

// TestPodResultFollowsPluginDisconnect: when the plugin goes away, the result of a pod
// holding its devices (the file and /status) is rewritten at once with them Unhealthy, as the
// node's allocatable says; when the plugin is back, with them Healthy.
func TestPodResultFollowsPluginDisconnect(t *testing.T) {
	f := newFixture(t)
	a, _ := f.run()
	p := f.plugin("g0", "g1")
	f.waitFor(a, "2 devices", func(st statusapi.NodeStatus) bool { return st.Allocatable["example.com/gpu"] == 2 })
	f.manifest("worker", 1)
	st := f.waitFor(a, "worker admitted", func(st statusapi.NodeStatus) bool {
		p := phase(st, "worker")
		return p != nil && p.Phase == podresult.PhaseAdmitted
	})
	uid := phase(st, "worker").UID
	f.waitForResultHealth(a, uid, v1.ResourceHealthStatusHealthy)

	p.Stop()
	f.waitFor(a, "allocatable 0", func(st statusapi.NodeStatus) bool { return st.Allocatable["example.com/gpu"] == 0 })
	f.waitForResultHealth(a, uid, v1.ResourceHealthStatusUnhealthy)

	back := f.pluginOn("gpu-back.sock", "g0", "g1")
	_ = back
	f.waitFor(a, "allocatable 2 again", func(st statusapi.NodeStatus) bool { return st.Allocatable["example.com/gpu"] == 2 })
	f.waitForResultHealth(a, uid, v1.ResourceHealthStatusHealthy)
}

// waitForResultHealth waits until the pod's result, in /status and in its file, gives every
// device the health want.
func (f *fixture) waitForResultHealth(a *Agent, uid types.UID, want v1.ResourceHealthStatus) {
	f.t.Helper()
	all := func(r *podresult.PodResult) bool {
		n := 0
		for _, c := range r.Containers {
			for _, rs := range c.AllocatedResourcesStatus {
				for _, h := range rs.Resources {
					if h.Health != want {
						return false
					}
					n++
				}
			}
		}
		return n > 0
	}
	f.waitFor(a, "the pod's devices "+string(want)+" in /status and its file", func(st statusapi.NodeStatus) bool {
		var inStatus *podresult.PodResult
		for _, p := range st.Pods {
			if p.UID == uid {
				inStatus = p
			}
		}
		files, err := podresult.ReadDir(a.cfg.PodsDir())
		if err != nil {
			f.t.Fatal(err)
		}
		return inStatus != nil && all(inStatus) && files[uid] != nil && all(files[uid])
	})
}

// pluginOn starts a plugin of example.com/gpu on the named socket with healthy devices ids.
func (f *fixture) pluginOn(socket string, ids ...string) *deviceplugin.Plugin {
	f.t.Helper()
	var devs []*pluginapi.Device
	for _, id := range ids {
		devs = append(devs, &pluginapi.Device{ID: id, Health: pluginapi.Healthy})
	}
	p, err := deviceplugin.New(deviceplugin.Config{ResourceName: "example.com/gpu", PluginDir: f.plugins, SocketName: socket,
		Devices: devs, Logger: ktesting.NewLogger(f.t, ktesting.NewConfig(ktesting.Verbosity(1)))})
	if err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := p.Start(ctx); err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(p.Stop)
	return p
}
