package e2e

import (
	"testing"
	"time"
)

// TestPluginStartedBeforeKdm (issue 13 item 9): the GPU plugin runs 1 s before kdm starts, so
// kdm's start-up cleanup deletes the plugin's socket while the plugin waits to register. Under
// both policies, the 8 GPUs must be in /status within 2 s of kdm first answering, not after a
// dial timeout spent on the deleted socket.
func TestPluginStartedBeforeKdm(t *testing.T) {
	forEachPolicy(t, func(t *testing.T, n *node, policy string) {
		n.startPlugin()
		time.Sleep(time.Second)
		n.startKdm("--policy", policy)

		deadline := time.Now().Add(30 * time.Second)
		for {
			if _, ok := n.status(); ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("kdm did not answer /status within 30s")
			}
			time.Sleep(10 * time.Millisecond)
		}
		answered := time.Now()
		const within = 2 * time.Second
		for {
			st, ok := n.status()
			if ok && gpus(8)(st) {
				t.Logf("8 GPUs %v after kdm first answered", time.Since(answered).Round(time.Millisecond))
				return
			}
			if time.Since(answered) > within {
				t.Fatalf("8 GPUs not in /status within %v of kdm answering; last status ok=%v capacity=%v allocatable=%v",
					within, ok, st.Capacity, st.Allocatable)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}
