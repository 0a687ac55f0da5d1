package agent

import (
	"strings"
	"testing"

	"github.com/kdm-project/kdm/agent/internal/apitest"
)

// TestAgentChecks: without an API server the agent checks ping, the registration server, the
// podresources socket and, for readiness, its pod sources; all pass once it runs.
func TestAgentChecks(t *testing.T) {
	f := newFixture(t)
	a, stop := f.run()
	var names []string
	for _, c := range a.Checks() {
		names = append(names, c.Name)
		apitest.Eventually(t, "check "+c.Name+" to pass", func() bool { return c.Check() == nil })
	}
	if got, want := strings.Join(names, ","), "ping,device-plugin,podresources,pod-sources"; got != want {
		t.Errorf("checks %s, want %s", got, want)
	}
	stop()
	for _, c := range a.Checks() {
		if c.Name == CheckPodResources && c.Check() == nil {
			t.Error("podresources check passes after the agent stopped")
		}
	}
}
