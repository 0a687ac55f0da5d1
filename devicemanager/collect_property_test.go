package devicemanager

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/internal/checkpoint"
	"github.com/kdm-project/kdm/internal/state"
)

const gcResource = "example.com/gpu"

// gcWorld runs the same random history on a manager, whose garbage collection follows the
// active pods from one collection to the next, and on an oracle State collected the way the
// manager did before: every active pod's UID put in a set, every pod of the state looked up
// in it (state.State.RemoveInactive). The pods come and go, are replaced by new objects with
// the same UID, are listed twice, come back; containers are allocated devices (with the
// collection their allocation makes), checkpoints restored, sources not ready for a while.
type gcWorld struct {
	t      *testing.T
	rng    *rand.Rand
	m      *Manager
	oracle *state.State
	pods   []*v1.Pod // what ActivePods lists now
	seen   []*v1.Pod // every object listed so far
	ready  bool
	now    time.Time
	log    []string
}

func newGCWorld(t *testing.T, dir string, seed uint64) *gcWorld {
	m, err := New(Config{PluginDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	w := &gcWorld{t: t, rng: rand.New(rand.NewPCG(seed, 0x9c)), m: m, oracle: state.New(state.Options{}),
		ready: true, now: time.Unix(1700000000, 0)}
	m.sources = Sources{
		ActivePods:   func() []*v1.Pod { return slices.Clone(w.pods) },
		SourcesReady: func() bool { return w.ready },
	}
	devs := devices(pluginapi.Healthy, ids("dev", 8)...)
	m.mu.Lock()
	m.st.AddRestored(gcResource, w.now)
	m.st.ApplyDeviceList(gcResource, devs)
	m.mu.Unlock()
	w.oracle.AddRestored(gcResource, w.now)
	w.oracle.ApplyDeviceList(gcResource, devs)
	return w
}

func (w *gcWorld) uid() string { return fmt.Sprintf("pod-%d", w.rng.IntN(10)) }

func (w *gcWorld) newPod(uid string) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Name: uid}}
	w.seen = append(w.seen, p)
	return p
}

// step makes one random change and checks the manager's state against the oracle's.
func (w *gcWorld) step() {
	switch op := w.rng.IntN(100); {
	case op < 15:
		uid := w.uid()
		w.logf("add %s", uid)
		w.pods = append(w.pods, w.newPod(uid))
	case op < 30 && len(w.pods) > 0:
		i := w.rng.IntN(len(w.pods))
		w.logf("remove %s", w.pods[i].UID)
		w.pods = slices.Delete(w.pods, i, i+1)
	case op < 40 && len(w.pods) > 0:
		i := w.rng.IntN(len(w.pods))
		w.logf("replace %s by a new object", w.pods[i].UID)
		w.pods[i] = w.newPod(string(w.pods[i].UID))
	case op < 44 && len(w.pods) > 0:
		p := w.pods[w.rng.IntN(len(w.pods))]
		w.logf("list %s twice", p.UID)
		w.pods = append(w.pods, p)
	case op < 48 && len(w.seen) > 0:
		p := w.seen[w.rng.IntN(len(w.seen))]
		w.logf("list an earlier object of %s again", p.UID)
		w.pods = append(w.pods, p)
	case op < 52:
		w.ready = !w.ready
		w.logf("sources ready=%v", w.ready)
	case op < 56:
		w.restore()
	case op < 75:
		w.logf("collect")
		w.collect()
	default:
		w.allocate()
	}
	w.compare()
}

func (w *gcWorld) logf(format string, args ...any) {
	w.log = append(w.log, fmt.Sprintf(format, args...))
}

// collect runs the manager's collection and the oracle's, and compares what they report.
func (w *gcWorld) collect() {
	got := w.m.collectInactivePods()
	var want []string
	if w.ready {
		active := sets.New[string]()
		for _, p := range w.pods {
			active.Insert(string(p.UID))
		}
		want = w.oracle.RemoveInactive(active)
	}
	if got != (len(want) > 0) {
		w.fail(fmt.Sprintf("collection reported removals=%v, the oracle removed %v", got, want))
	}
}

// restore restores the same random checkpoint in both states.
func (w *gcWorld) restore() {
	var entries []checkpoint.PodDevicesEntry
	for range w.rng.IntN(4) {
		entries = append(entries, checkpoint.PodDevicesEntry{PodUID: w.uid(),
			ContainerName: fmt.Sprintf("c%d", w.rng.IntN(2)), ResourceName: gcResource,
			DeviceIDs: checkpoint.DevicesPerNUMA{state.NoTopology: {fmt.Sprintf("dev-%d", w.rng.IntN(8))}},
			AllocResp: []byte{}})
	}
	w.logf("restore %v", entries)
	w.m.mu.Lock()
	w.m.st.Restore(&checkpoint.Data{PodDeviceEntries: slices.Clone(entries)}, nil, w.now)
	w.m.mu.Unlock()
	w.oracle.Restore(&checkpoint.Data{PodDeviceEntries: slices.Clone(entries)}, nil, w.now)
}

// allocate allocates devices to a random container of a random pod in both states, step by
// step, the manager's collection running at its StepCollect.
func (w *gcWorld) allocate() {
	uid, ctr := w.uid(), fmt.Sprintf("c%d", w.rng.IntN(3))
	regularInit := w.rng.IntN(2) == 0
	demands := []state.Demand{{Resource: gcResource, Required: 1 + w.rng.IntN(2), Awaitable: true}}
	w.logf("allocate %s/%s regularInit=%v %d", uid, ctr, regularInit, demands[0].Required)
	w.m.mu.Lock()
	got := w.m.st.NewContainerSteps(uid, ctr, regularInit, demands)
	w.m.mu.Unlock()
	want := w.oracle.NewContainerSteps(uid, ctr, regularInit, demands)
	for {
		w.m.mu.Lock()
		gs := got.Next(w.m.st)
		w.m.mu.Unlock()
		ws := want.Next(w.oracle)
		if gs.Kind != ws.Kind {
			w.fail(fmt.Sprintf("allocation steps differ: manager %d, oracle %d", gs.Kind, ws.Kind))
		}
		switch gs.Kind {
		case state.StepDone:
			return
		case state.StepAwaitUnknown:
			got.Served(false, nil)
			want.Served(false, nil)
		case state.StepCollect:
			w.collect()
		case state.StepSelect:
			req := state.Request{PodUID: uid, Container: ctr, Resource: gs.Resource, Required: gs.Required, SourcesReady: w.ready}
			w.m.mu.Lock()
			req.Reusable = gs.Reusable
			gIDs, _, gErr := w.m.st.Select(req, nil)
			w.m.mu.Unlock()
			req.Reusable = ws.Reusable
			wIDs, _, wErr := w.oracle.Select(req, nil)
			if !gIDs.Equal(wIDs) || (gErr == nil) != (wErr == nil) {
				w.fail(fmt.Sprintf("selections differ: manager %v %v, oracle %v %v", sets.List(gIDs), gErr, sets.List(wIDs), wErr))
			}
			got.Selected(gIDs, gErr)
			want.Selected(wIDs, wErr)
		case state.StepAllocate:
			w.m.mu.Lock()
			gs.Pick.Devices, _, _ = w.m.st.DevicesPerNUMA(gs.Pick.Resource, gs.Pick.IDs)
			w.m.mu.Unlock()
			ws.Pick.Devices, _, _ = w.oracle.DevicesPerNUMA(ws.Pick.Resource, ws.Pick.IDs)
			gs.Pick.Response, ws.Pick.Response = &pluginapi.ContainerAllocateResponse{}, &pluginapi.ContainerAllocateResponse{}
			got.Allocated(nil)
			want.Allocated(nil)
		case state.StepWrite:
			got.Written(nil)
			want.Written(nil)
		}
	}
}

func (w *gcWorld) compare() {
	var got, want strings.Builder
	w.m.mu.Lock()
	w.m.st.Describe(&got)
	w.m.mu.Unlock()
	w.oracle.Describe(&want)
	if got.String() != want.String() {
		w.fail(fmt.Sprintf("states differ\nmanager:\n%s\noracle:\n%s", got.String(), want.String()))
	}
}

func (w *gcWorld) fail(msg string) {
	w.t.Helper()
	w.t.Fatalf("%s\nafter:\n%s", msg, strings.Join(w.log, "\n"))
}

// TestCollectInactivePodsFollowsActivePods checks that the manager's garbage collection,
// which looks only at what changed since the previous one, always leaves the state the
// collection of every pod against the set of active UIDs leaves.
func TestCollectInactivePodsFollowsActivePods(t *testing.T) {
	dir := shortDir(t)
	for seed := range uint64(300) {
		w := newGCWorld(t, dir, seed)
		w.logf("seed %d", seed)
		for range 150 {
			w.step()
		}
	}
}
