package e2e

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/kdm-project/kdm/agent/statusapi"
)

// Bounds of the many-process Register flood test.
const (
	// registrantProcesses is how many separate processes flood kubelet.sock, each holding
	// one Register of a socket that never answers and retrying at once when it ends.
	registrantProcesses = 200
	// registerUnderFloodBound bounds how long the restarted plugin may take to register
	// during the flood, from its process start. kdm's aim is 5 s; the bound leaves twice that
	// for a loaded machine. Before the registrations waiting for an answer were kept apart
	// from the dials, the plugin never registered within 30 s.
	registerUnderFloodBound = 10 * time.Second
	slowResource            = "example.com/slow"
)

// TestRegisterFloodFromManyProcesses: 200 processes each register a socket that accepts and
// never answers, half of them naming the plugin's resource, again at once whenever their call
// ends. Once kdm holds every one of their calls (it has connected to every socket), a plugin
// whose GetDevicePluginOptions answers after 300 ms (1.5 s in one case) is killed and started
// again: it registers within registerUnderFloodBound, while kdm's memory stays within the
// bound of the one-process flood test. Under every policy.
func TestRegisterFloodFromManyProcesses(t *testing.T) {
	innerLoopSkips(t, "starts 200 registrant processes under every policy")
	for _, pol := range hostilePolicies {
		t.Run(pol, func(t *testing.T) { registerDuringProcessFlood(t, pol, 300*time.Millisecond) })
	}
	t.Run("kdm,options-after-1.5s", func(t *testing.T) { registerDuringProcessFlood(t, "kdm", 1500*time.Millisecond) })
}

func registerDuringProcessFlood(t *testing.T, policy string, optionsDelay time.Duration) {
	n := newNode(t)
	kdm := n.startKdm("--policy", policy)
	plugin := func() *process {
		return n.startHostile("slow-plugin", "-plugin-dir", n.pluginDir, "-socket", "slow.sock",
			"-resource", slowResource, "-devices", "4", "-options-delay", optionsDelay.String())
	}
	slow := func(allocatable int64) func(statusapi.NodeStatus) bool {
		return func(st statusapi.NodeStatus) bool {
			return st.Capacity[slowResource] == 4 && st.Allocatable[slowResource] == allocatable
		}
	}
	first := plugin()
	n.eventually("the slow plugin's 4 devices", slow(4))
	before := vmRSS(t, kdm.cmd.Process.Pid)

	var flood []*process
	for i := range registrantProcesses {
		resource := slowResource
		if i%2 == 1 {
			resource = "flood.example/r" + strconv.Itoa(i)
		}
		flood = append(flood, n.startHostile("register-silent", "-plugin-dir", n.pluginDir,
			"-socket", fmt.Sprintf("silent-%d.sock", i), "-resource", resource))
	}
	waitHeld(t, flood, time.Minute)

	first.kill()
	n.eventually("allocatable 0 while the plugin is down", slow(0))
	started := time.Now()
	plugin()
	if !n.within(registerUnderFloodBound, slow(4)) {
		t.Fatalf("the restarted plugin (options after %v) did not register within %v of its start while %d processes flooded kubelet.sock",
			optionsDelay, registerUnderFloodBound, registrantProcesses)
	}
	took := time.Since(started)
	stillRunning(t, flood)
	during := vmRSS(t, kdm.cmd.Process.Pid)
	t.Logf("policy %s: the plugin (options after %v) registered %v after its start while %d processes flooded; kdm RSS %d MiB before the flood, %d MiB during it",
		policy, optionsDelay, took.Round(time.Millisecond), registrantProcesses, before>>20, during>>20)
	if during-before > floodRSSGrowth {
		t.Errorf("kdm's RSS grew by %d MiB during the flood; want at most %d MiB", (during-before)>>20, floodRSSGrowth>>20)
	}
	for _, p := range flood {
		p.kill()
	}
	kdm.terminate(t)
}
