package e2e

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/kdm-project/kdm/agent/podresult"
	"github.com/kdm-project/kdm/agent/statusapi"
)

// TestPluginKillHealthViews: the GPU plugin is SIGKILLed while a pod holds two GPUs. Every view
// of them turns Unhealthy, not only the node's (/api/state's device grid, allocatable 0): the
// pod's card on the page (/api/state), its /status entry and its pods/*.json. When the plugin
// is back, every view says Healthy again.
func TestPluginKillHealthViews(t *testing.T) {
	for _, policy := range policies {
		t.Run(policy, func(t *testing.T) {
			n := newNode(t)
			kdm := n.startWithGPUs(policy)
			held := n.admit("a", 2)
			n.expectHealth("a", held, v1.ResourceHealthStatusHealthy)

			n.killPlugins()
			n.expectHealth("a", held, v1.ResourceHealthStatusUnhealthy)

			n.startPlugin()
			n.eventually("plugin back", gpus(8))
			n.expectHealth("a", held, v1.ResourceHealthStatusHealthy)
			kdm.terminate(t)
		})
	}
}

// expectHealth waits until the pod's GPUs ids have the health want in every view: the device
// grid and the pod's card of /api/state, the pod's /status entry and its pods/*.json.
func (n *node) expectHealth(name string, ids []string, want v1.ResourceHealthStatus) {
	n.t.Helper()
	n.eventually(name+"'s GPUs "+string(want)+" in every view", func(st statusapi.NodeStatus) bool {
		grid, card := n.pageHealth(name)
		results, err := podresult.ReadDir(resultsDir(n.rootDir))
		if err != nil {
			n.t.Fatal(err)
		}
		var file *podresult.PodResult
		for _, r := range results {
			if r.Name == name {
				file = r
			}
		}
		for _, id := range ids {
			if grid[id] != string(want) || card[id] != (want == v1.ResourceHealthStatusUnhealthy) ||
				healthOf(pod(st, name), id) != want || healthOf(file, id) != want {
				return false
			}
		}
		return true
	})
}

// pageHealth returns, from the status page's state (/api/state), the health of every GPU on
// the device grid and the GPUs the named pod's card marks unhealthy; nil while kdm does not
// answer.
func (n *node) pageHealth(name string) (grid map[string]string, card map[string]bool) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + n.healthAddr + "/api/state")
	if err != nil {
		return nil, nil
	}
	defer func() { _ = resp.Body.Close() }()
	var st statusapi.PageState
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&st) != nil {
		return nil, nil
	}
	grid, card = map[string]string{}, map[string]bool{}
	for _, r := range st.Resources {
		if r.Name != "nvidia.com/gpu" {
			continue
		}
		for _, d := range r.Devices {
			grid[d.ID] = d.Health
		}
	}
	for _, p := range st.Pods {
		if p.Name != name {
			continue
		}
		for _, c := range p.Containers {
			for _, id := range c.Unhealthy {
				card[id] = true
			}
		}
	}
	return grid, card
}
