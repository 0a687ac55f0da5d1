package e2e

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"testing"
	"time"

	cri "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/kdm-project/kdm/agent/podresult"
	"github.com/kdm-project/kdm/agent/podruntime"
	"github.com/kdm-project/kdm/agent/statusapi"
)

// TestContainerRuntimeCrashDuringStart (issue 42, item 7): kdm killed between CreateContainer
// and StartContainer, and between StartContainer and recording the container's state, while
// its pod is then removed and another pod wants GPUs: after the restart, every container the
// runtime holds belongs to a pod kdm accounts for, and no GPU that such a container holds is
// given to the new pod until the container is gone.
func TestContainerRuntimeCrashDuringStart(t *testing.T) {
	if testing.Short() {
		t.Skip("kills kdm during container starts; run by make test")
	}
	for _, point := range []string{podruntime.CrashAfterCreate, podruntime.CrashAfterStart} {
		t.Run(point, func(t *testing.T) { crashDuringStart(t, point) })
	}
}

func crashDuringStart(t *testing.T, point string) {
	rn := newRuntimeNode(t)
	t.Setenv(podruntime.CrashPointEnv, point)
	kdm := rn.startKdm()
	if err := os.Unsetenv(podruntime.CrashPointEnv); err != nil { // the restarted kdm runs unhooked
		t.Fatal(err)
	}
	rn.startGPUPlugin()
	rn.eventually("8 GPUs", gpus(8))
	// The victim ignores SIGTERM: only its grace period's end (10 s) stops it.
	rn.writeProbePod("victim", "Always", probeContainer{name: "main", gpus: 4, termDelay: 10 * time.Minute})
	select {
	case <-kdm.done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("kdm did not kill itself at %s", point)
	}
	files, err := podresult.ReadDir(resultsDir(rn.rootDir))
	if err != nil {
		t.Fatal(err)
	}
	var victimGPUs []string
	for _, r := range files {
		if r.Name == "victim" {
			victimGPUs = resultGPUs(r)
		}
	}
	if len(victimGPUs) != 4 {
		t.Fatalf("the victim's result before the crash names GPUs %v; want 4", victimGPUs)
	}
	wantState := cri.ContainerState_CONTAINER_CREATED
	if point == podruntime.CrashAfterStart {
		wantState = cri.ContainerState_CONTAINER_RUNNING
	}
	if c := rn.containersOf("victim")["main"]; c == nil || c.State != wantState {
		t.Fatalf("after the crash at %s the victim's container is %+v; want it %v", point, c, wantState)
	}

	// While kdm is down the victim is removed and a pod asking for 4 GPUs comes.
	rn.deletePod("victim")
	rn.writeProbePod("newcomer", "Always", probeContainer{name: "main", gpus: 4})
	rn.startKdm()
	rn.eventually("the newcomer decided", decided("newcomer"))
	if point == podruntime.CrashAfterStart {
		// Its container ignores SIGTERM for its 10 s grace period: meanwhile kdm get pods
		// shows the pod, known only from its result, Terminating with the GPUs it holds.
		rn.eventually("the victim Terminating", func(st statusapi.NodeStatus) bool {
			p := pod(st, "victim")
			return p != nil && p.Terminating != nil
		})
		var got getPodsTerminating
		if err := json.Unmarshal([]byte(rn.kdmGet("pods", "-o", "json")), &got); err != nil {
			t.Fatal(err)
		}
		var shown []string
		for _, p := range got.Items {
			if p.Name != "victim" {
				continue
			}
			if p.Terminating == nil {
				t.Errorf("kdm get pods -o json: the victim is not Terminating: %+v", p)
			}
			for _, c := range p.Containers {
				for _, d := range c.Devices {
					shown = append(shown, d.IDs...)
				}
			}
		}
		if !slices.Equal(sorted(shown), sorted(victimGPUs)) {
			t.Errorf("after the restart kdm get pods shows the removed victim holding %v; want %v until its container is gone", shown, victimGPUs)
		}
	}
	for {
		// The runtime's containers first: a container listed gone was gone when the views
		// were read.
		holders := rn.runtimeHolders()
		st, ok := rn.status()
		if !ok {
			t.Fatal("kdm stopped serving /status")
		}
		for uid := range holders {
			if accounted(st, uid) == nil {
				t.Fatalf("the runtime holds a container of pod %s, which kdm does not account for; status %+v", uid, st)
			}
		}
		victim := rn.containersOf("victim")["main"]
		if victim == nil || victim.State == cri.ContainerState_CONTAINER_EXITED {
			break
		}
		if nc := pod(st, "newcomer"); nc != nil {
			for _, id := range resultGPUs(nc) {
				if slices.Contains(victimGPUs, id) {
					t.Fatalf("the newcomer got %s, which the removed victim's container still holds", id)
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	rn.eventually("the victim gone from every view", func(st statusapi.NodeStatus) bool { return pod(st, "victim") == nil })
	rn.waitFor("the newcomer running", time.Minute, func() bool {
		st, ok := rn.status()
		return ok && running("newcomer")(st)
	})
}

// runtimeHolders lists the pod UIDs of the runtime's kdm containers that are not exited.
func (rn *runtimeNode) runtimeHolders() map[string]bool {
	rn.t.Helper()
	out := map[string]bool{}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := rn.rt.ListContainers(ctx, &cri.ListContainersRequest{Filter: &cri.ContainerFilter{
		LabelSelector: map[string]string{podruntime.LabelManaged: "true"}}})
	if err != nil {
		rn.t.Fatalf("listing the runtime's containers: %v", err)
	}
	for _, c := range resp.Containers {
		if c.State != cri.ContainerState_CONTAINER_EXITED {
			out[c.Labels[podruntime.LabelPodUID]] = true
		}
	}
	return out
}

// accounted returns kdm's result of the pod with this UID, nil if kdm does not know it.
func accounted(st statusapi.NodeStatus, uid string) *podresult.PodResult {
	for _, p := range st.Pods {
		if string(p.UID) == uid {
			return p
		}
	}
	return nil
}
