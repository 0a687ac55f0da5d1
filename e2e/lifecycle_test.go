package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kdm-project/kdm/agent/podresult"
	"github.com/kdm-project/kdm/agent/statusapi"
)

// The pod lifecycle as the kubelet runs it: pods removed together stop together, each with its
// own grace period, and show Terminating in every view until the runtime confirms their
// containers gone; a rejected pod stays rejected across restarts.

// waitFor polls cond until it holds, failing the test after limit.
func (n *node) waitFor(what string, limit time.Duration, cond func() bool) {
	n.t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			n.t.Fatalf("timed out after %v waiting for %s", limit, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// pageState reads /api/state.
func (n *node) pageState() statusapi.PageState {
	n.t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + n.healthAddr + "/api/state")
	if err != nil {
		n.t.Fatalf("reading /api/state: %v", err)
	}
	defer func() { _ = resp.Body.Close() }()
	var st statusapi.PageState
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		n.t.Fatalf("decoding /api/state: %v", err)
	}
	return st
}

// getPodsTerminating is the part of `kdm get pods -o json` this file reads.
type getPodsTerminating struct {
	Items []struct {
		Name        string                 `json:"name"`
		Phase       string                 `json:"phase"`
		Terminating *podresult.Termination `json:"terminating"`
		Containers  []struct {
			Devices []struct {
				Resource string   `json:"resource"`
				IDs      []string `json:"ids"`
			} `json:"devices"`
		} `json:"containers"`
	} `json:"items"`
}

// TestContainerRuntimePodsStopInParallel (issue 43): five GPU pods whose containers ignore
// SIGTERM, each with a 30 s grace period, removed at once: they stop together (the kubelet's
// pod workers), so all GPUs are free within 40 s, not one pod after another (150 s). Meanwhile
// every view says Terminating and shows the GPUs still held.
func TestContainerRuntimePodsStopInParallel(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a 30 s grace period; run by make test")
	}
	rn := newRuntimeNode(t)
	rn.startKdm()
	rn.startGPUPlugin()
	rn.eventually("8 GPUs", gpus(8))
	var names []string
	for i := range 5 {
		name := fmt.Sprintf("stop-%d", i)
		names = append(names, name)
		// The probe waits 10 minutes after SIGTERM: only SIGKILL, at the end of the grace
		// period, ends it.
		rn.writeProbePodGrace(name, "Always", 30, probeContainer{name: "main", gpus: 1, termDelay: 10 * time.Minute})
	}
	rn.eventually("five pods running", func(st statusapi.NodeStatus) bool {
		for _, name := range names {
			if !running(name)(st) {
				return false
			}
		}
		return true
	})

	removed := time.Now()
	for _, name := range names {
		rn.deletePod(name)
	}
	rn.eventually("five pods Terminating", func(st statusapi.NodeStatus) bool {
		for _, name := range names {
			if p := pod(st, name); p == nil || p.Terminating == nil {
				return false
			}
		}
		return true
	})

	// Every view, while the containers still run.
	files, err := podresult.ReadDir(resultsDir(rn.rootDir))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		r := files[types.UID(uidOf(name))]
		if r == nil || r.Terminating == nil || r.Terminating.GracePeriodSeconds == nil || *r.Terminating.GracePeriodSeconds != 30 {
			t.Errorf("%s's result file: %+v; want terminating with a 30 s grace period", name, r)
		}
	}
	var got getPodsTerminating
	if err := json.Unmarshal([]byte(rn.kdmGet("pods", "-o", "json")), &got); err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, p := range got.Items {
		if !strings.HasPrefix(p.Name, "stop-") {
			continue
		}
		seen++
		ids := 0
		for _, c := range p.Containers {
			for _, d := range c.Devices {
				ids += len(d.IDs)
			}
		}
		if p.Terminating == nil || ids != 1 {
			t.Errorf("kdm get pods -o json: %s is %+v; want terminating, still holding its GPU", p.Name, p)
		}
	}
	if seen != 5 {
		t.Errorf("kdm get pods -o json lists %d of the 5 stopping pods", seen)
	}
	table := rn.kdmGet("pods")
	if n := strings.Count(table, "Terminating"); n != 5 {
		t.Errorf("kdm get pods shows Terminating %d times; want 5:\n%s", n, table)
	}
	page := rn.pageState()
	for _, name := range names {
		found := false
		for _, p := range page.Pods {
			found = found || p.Name == name && p.Terminating != nil
		}
		if !found {
			t.Errorf("/api/state does not show %s Terminating", name)
		}
	}
	if m := rn.metric("kdm_terminating_pods"); m != "5" {
		t.Errorf("/metrics: %q; want kdm_terminating_pods 5", m)
	}
	if free := rn.freeGPUs(); free > 3 {
		t.Errorf("%d GPUs free while the five removed pods' containers run; want 3", free)
	}

	rn.waitFor("all 8 GPUs free", 3*time.Minute, func() bool { return rn.freeGPUs() == 8 })
	took := time.Since(removed)
	t.Logf("five pods with 30 s grace periods removed at once: all GPUs free %v after the removal", took.Round(100*time.Millisecond))
	if took > 40*time.Second {
		t.Errorf("all GPUs free %v after the removal; want within 40 s (the pods stop in parallel, 30 s each)", took)
	}
	rn.eventually("the removed pods gone from every view", func(st statusapi.NodeStatus) bool {
		for _, name := range names {
			if pod(st, name) != nil {
				return false
			}
		}
		return true
	})
	if m := rn.metric("kdm_terminating_pods"); m != "0" {
		t.Errorf("/metrics: %q; want kdm_terminating_pods 0", m)
	}
}

// TestContainerRuntimeRejectionIsTerminal (issue 43): under --policy kdm, a pod rejected for
// want of GPUs stays rejected however often kdm is killed and restarted, also once enough GPUs
// are free: the kubelet's Failed is terminal, and a retry is a new pod. Its GPUs stay free and
// no container of it ever runs.
func TestContainerRuntimeRejectionIsTerminal(t *testing.T) {
	if testing.Short() {
		t.Skip("kills and restarts kdm twice with containers; run by make test")
	}
	rn := newRuntimeNode(t)
	kdm := rn.startKdm()
	rn.startGPUPlugin()
	rn.eventually("8 GPUs", gpus(8))
	rn.writeProbePod("hog", "Always", probeContainer{name: "main", gpus: 6})
	rn.eventually("hog running", running("hog"))
	rn.writeProbePod("big", "Always", probeContainer{name: "main", gpus: 4})
	st := rn.eventually("big rejected", func(st statusapi.NodeStatus) bool {
		p := pod(st, "big")
		return p != nil && p.Phase == podresult.PhaseRejected
	})
	first := *pod(st, "big")

	for round := range 2 {
		if round == 1 {
			// Before the second kill the hog goes: 8 GPUs are free, 4 of which big asked for.
			rn.deletePod("hog")
			rn.waitFor("the hog's GPUs free", 2*time.Minute, func() bool { return rn.freeGPUs() == 8 })
		}
		kdm.kill()
		kdm = rn.startKdm()
		// A pod written after the restart runs once the sources have been read again.
		marker := fmt.Sprintf("marker-%d", round)
		rn.writeProbePod(marker, "Always", probeContainer{name: "main"})
		st = rn.eventually(marker+" running after restart", running(marker))
		big := pod(st, "big")
		if big == nil || big.Phase != podresult.PhaseRejected || big.Reason != first.Reason || big.Message != first.Message {
			t.Fatalf("after SIGKILL restart %d, big is %+v; want still rejected: %s: %s", round+1, big, first.Reason, first.Message)
		}
		if c := rn.containersOf("big"); len(c) != 0 {
			t.Fatalf("after SIGKILL restart %d, the rejected pod has containers: %v", round+1, c)
		}
		want := int64(2)
		if round == 1 {
			want = 8
		}
		if free := rn.freeGPUs(); free != want {
			t.Fatalf("after SIGKILL restart %d, %d GPUs free; want %d (the rejected pod holds none)", round+1, free, want)
		}
	}
	if got := rows(rn.kdmGet("pods")); !strings.Contains(fmt.Sprint(got), "big Rejected: "+first.Reason) {
		t.Errorf("kdm get pods after the restarts:\n%v\nwant big Rejected: %s", got, first.Reason)
	}
}
