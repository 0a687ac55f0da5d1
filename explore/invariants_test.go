package explore

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/checkpoint"
	"github.com/kdm-project/kdm/devicemanager"
	"github.com/kdm-project/kdm/internal/state"
)

func policyOf(tb testing.TB, name string) devicemanager.Policy {
	p, err := devicemanager.ParsePolicy(name)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// running builds a world with a GPU plugin and two admitted pods, p1 and p2, one GPU each.
func running(t *testing.T) *world {
	w := newWorld(policyOf(t, "kdm"), true)
	for _, e := range []*Event{
		{Kind: "plugin-start", Name: "gpu", Args: []string{"devices=4"}},
		{Kind: "pod-admit", Name: "p1", Args: []string{"gpu=1"}},
		{Kind: "pod-admit", Name: "p2", Args: []string{"gpu=1"}},
	} {
		w.apply(e)
	}
	w.drain()
	if v := w.check(); v != nil {
		t.Fatalf("healthy world breaks %v", v)
	}
	return w
}

// TestInvariantsCatchBreakage: each invariant fails when the state is broken the way it
// guards against, so that a clean exploration means something.
func TestInvariantsCatchBreakage(t *testing.T) {
	resp := &pluginapi.ContainerAllocateResponse{}
	for _, tc := range []struct {
		name   string
		want   Invariant
		break_ func(w *world)
	}{
		{"device given to a second pod", NoSharedDevice, func(w *world) {
			w.st.Commit("uid-p2", "app-0", "example.com/gpu", nil, checkpoint.DevicesPerNUMA{-1: {"gpu-0"}}, resp)
		}},
		{"assignment dropped", KeepsAssignment, func(w *world) {
			w.st.RemoveInactive(sets.New("uid-p2"))
		}},
		{"rejected though its plugin is back", NoRejectionAfterRestart, func(w *world) {
			w.rejections = append(w.rejections, rejection{pod: "p1", resource: "example.com/gpu", restart: w.now})
		}},
		{"checkpoint torn", CheckpointRestores, func(w *world) { b := w.file(); w.disk = b[:len(b)-3] }},
		{"checkpoint behind", CheckpointRestores, func(w *world) {
			b, _ := checkpoint.Encode(&checkpoint.Data{RegisteredDevices: map[string][]string{}})
			w.file()
			w.disk = b
		}},
		{"list out of step with the plugin", CapacityMatchesPlugins, func(w *world) {
			w.st.ApplyDeviceList("example.com/gpu", []*pluginapi.Device{{ID: "gpu-0", Health: pluginapi.Healthy}})
		}},
		{"answer swapped", RunOptionsFromPlugin, func(w *world) {
			w.st.Commit("uid-p1", "app-0", "example.com/gpu", nil, checkpoint.DevicesPerNUMA{-1: {"gpu-0"}},
				&pluginapi.ContainerAllocateResponse{Envs: map[string]string{"KDM_DEVICES": "gpu-3"}})
		}},
		{"connected to no live plugin", CapacityMatchesPlugins, func(w *world) {
			w.plugins["gpu"].alive = false // the process died; the manager never saw the stream end
		}},
		{"rejected with free devices listed", NoNeedlessRejection, func(w *world) {
			w.apply(&Event{Kind: "pod-admit", Name: "p3", Args: []string{"gpu=1"}})
			w.reject(w.admissions[0], "example.com/gpu", "injected refusal")
		}},
		{"deleted pod keeps its devices", DeletedPodFreed, func(w *world) {
			w.pods["p1"].phase = podDeleted // without the collection that follows a deletion
		}},
		{"deferral past its timeout", DeferralEnds, func(w *world) {
			w.apply(&Event{Kind: "plugin-stop", Name: "gpu"})
			w.apply(&Event{Kind: "pod-admit", Name: "p3", Args: []string{"gpu=1"}})
			r := w.rules
			r.DeferAdmissionTimeout = 24 * time.Hour // a wait the policy does not bound
			a := w.admissions[0]
			a.wait, a.waitRes = waitNoHealthy, "example.com/gpu"
			a.deferral = r.Defer(w.st, a.waitRes, state.ErrNoHealthyDevices, w.now)
		}},
		{"reservation left", NoReservationLeak, func(w *world) {
			w.st.Select(state.Request{PodUID: "x", Container: "c", Resource: "example.com/gpu", Required: 1, SourcesReady: true},
				func(_, _ sets.Set[string], _ int) (sets.Set[string], error) { return sets.New[string](), nil })
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := running(t)
			tc.break_(w)
			v := w.check()
			if v == nil || v.Invariant != tc.want {
				t.Fatalf("check after %s: %v, want %s", tc.name, v, tc.want)
			}
		})
	}
}
