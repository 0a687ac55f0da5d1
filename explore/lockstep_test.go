package explore

import (
	"os"
	"strconv"
	"testing"

	"github.com/kdm-project/kdm/devicemanager"
)

// lockstepSeeds is how many seeds per policy TestLockstep runs: LOCKSTEP_SEEDS (make
// lockstep), or a few dozen, fewer under -short: every step of the real manager costs real
// sockets, processes' goroutines and files, under the race detector in CI.
func lockstepSeeds(t *testing.T) int {
	if v := os.Getenv("LOCKSTEP_SEEDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("LOCKSTEP_SEEDS=%q: want a positive number", v)
		}
		return n
	}
	if testing.Short() {
		return 10
	}
	return 40
}

// TestLockstep: random runs, made by the simulator and by the real manager step for step,
// show the same pods, allocations, capacity and checkpoint after every step, under every
// policy.
func TestLockstep(t *testing.T) {
	seeds := lockstepSeeds(t)
	for _, policy := range devicemanager.PolicyNames() {
		t.Run(policy, func(t *testing.T) {
			var first int64
			if v := os.Getenv("LOCKSTEP_FIRST_SEED"); v != "" { // replays a seed a run reported
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					t.Fatalf("LOCKSTEP_FIRST_SEED=%q: want a number", v)
				}
				first = n
			}
			rep, err := Lockstep(LockstepConfig{Policy: policy, Seeds: seeds, FirstSeed: first})
			if err != nil {
				t.Fatal(err)
			}
			if d := rep.Divergence; d != nil {
				t.Fatal(d)
			}
			t.Logf("%s: %d seeds, %d steps in %v", policy, rep.Runs, rep.Steps, rep.Elapsed)
		})
	}
}

// TestLockstepFoundSeeds replays the seeds on which long runs of make lockstep once found
// the manager and the simulator apart, each under the policy it was found under: a health
// change the runner awaited though no manager could see it (1123), woken admissions served in
// goroutine order (983) and, at one deadline shared by several, garbage-collected before a
// rejection (4492), a promoted instance's late list (2624, a schedule this replay need not
// hit; TestLateListOfAStoppedInstanceIgnored holds it), and a plugin's two connections ending
// in either order at its stop (1713, 5017: a replaced connection promoted for a moment, about
// one replay in ten under -race before the runner ordered the ends).
func TestLockstepFoundSeeds(t *testing.T) {
	for _, tc := range []struct {
		policy string
		seed   int64
	}{{"kubelet-1.36", 1123}, {"kdm", 983}, {"kdm", 4492}, {"kdm", 2624}, {"kdm", 1713}, {"kdm", 5017}} {
		rep, err := Lockstep(LockstepConfig{Policy: tc.policy, Seeds: 1, FirstSeed: tc.seed})
		if err != nil {
			t.Fatal(err)
		}
		if d := rep.Divergence; d != nil {
			t.Errorf("%s seed %d: %v", tc.policy, tc.seed, d)
		}
	}
}

// TestLockstepCatchesDivergences: each way the simulator used to decide on its own, put
// back (legacy), makes the lockstep check fail within a bounded number of seeds.
func TestLockstepCatchesDivergences(t *testing.T) {
	if testing.Short() {
		t.Skip("replays up to 200 seeds through the real manager per divergence")
	}
	for _, tc := range []struct {
		name   string
		policy string
		set    func(on bool)
	}{
		{"a completed pod freed and never admitted again", "kdm", func(on bool) { legacy.completedFrees = on }},
		{"plugin start on a running plugin adds an instance", "kdm", func(on bool) { legacy.startAdds = on }},
		{"the deferral wait's own copy", "kdm", func(on bool) { legacy.deferralCopy = on }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.set(true)
			defer tc.set(false)
			rep, err := Lockstep(LockstepConfig{Policy: tc.policy, Seeds: 200})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Divergence == nil {
				t.Fatalf("no divergence in %d seeds", rep.Runs)
			}
			t.Logf("found at seed %d after %d runs:\n%v", rep.Divergence.Seed, rep.Runs, rep.Divergence)
		})
	}
}

// TestLockstepCompletedPod: the script, a pod admitted after another completed on a
// one-device plugin, ends the same in both drivers under every policy (the completed pod keeps
// its device, so the second is refused).
func TestLockstepCompletedPod(t *testing.T) {
	steps := []Step{
		{Event: &Event{Kind: "plugin-start", Name: "gpu", Args: []string{"devices=1"}}},
		{Event: &Event{Kind: "pod-admit", Name: "p1", Args: []string{"gpu=1"}}},
		{Event: &Event{Kind: "pod-complete", Name: "p1"}},
		{Event: &Event{Kind: "pod-admit", Name: "p2", Args: []string{"gpu=1"}}},
		{Event: &Event{Kind: "kubelet-restart"}},
	}
	for _, policy := range devicemanager.PolicyNames() {
		n, d, err := runLockstep(policy, true, steps)
		if err != nil {
			t.Fatal(err)
		}
		if d != nil {
			t.Errorf("%s: step %d: %v", policy, n, d)
		}
	}
}
