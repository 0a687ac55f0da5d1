package e2e

import (
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kdm-project/kdm/devicemanager"
)

// TestCrashLoop checks kdm's promise that a running container keeps its devices and that no
// device is ever held by two containers, whatever operators and plugins do. For each policy a
// seeded PRNG drives rounds of actions against real processes: SIGKILL kdm, the plugin or both
// and start them again; create, delete, rewrite in place and edit in place (same UID, another
// GPU count) pod manifests, some of them right before a kill or while kdm is down. After every
// round the node must converge to a state where
//  1. `kdm inspect --json` reads the checkpoint;
//  2. no GPU is held twice, and the checkpoint, pods/*.json, NVIDIA_VISIBLE_DEVICES and
//     podresources agree for every admitted pod whose manifest exists;
//  3. every pod admitted before the round (or before the kill, per pods/*.json) whose manifest
//     was never deleted meanwhile is still admitted with exactly the same GPUs.
//
// KDM_CRASHLOOP_SEED replays a run; KDM_CRASHLOOP_ROUNDS sets the rounds per policy (30).
func TestCrashLoop(t *testing.T) {
	if testing.Short() {
		t.Skip("crash loop: real processes, many restarts; run by make test")
	}
	seed := time.Now().UnixNano()
	if s := os.Getenv("KDM_CRASHLOOP_SEED"); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("KDM_CRASHLOOP_SEED=%q is not an integer: %v", s, err)
		}
		seed = v
	}
	rounds := 30
	if s := os.Getenv("KDM_CRASHLOOP_ROUNDS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			t.Fatalf("KDM_CRASHLOOP_ROUNDS=%q is not a positive integer", s)
		}
		rounds = v
	}
	t.Logf("crash loop seed %d (replay with KDM_CRASHLOOP_SEED=%d), %d rounds per policy", seed, seed, rounds)
	for _, policy := range devicemanager.PolicyNames() { // every kubelet minor, then kdm
		t.Run(policy, func(t *testing.T) {
			cl := &crashLoop{t: t, n: newNode(t), policy: policy, seed: seed, r: rand.New(rand.NewSource(seed)),
				disk: map[string]int{}, expect: map[string][]string{}}
			cl.run(rounds)
		})
	}
}

// crashPods is the pool of pod names: 8 pods of 1-3 GPUs on 8 GPUs, so some are rejected.
var crashPods = []string{"p0", "p1", "p2", "p3", "p4", "p5", "p6", "p7"}

// crashLoop is one policy's run: the processes, the model of the manifest directory and the
// devices each pod must keep.
type crashLoop struct {
	t      *testing.T
	n      *node
	policy string
	seed   int64
	r      *rand.Rand

	kdm, plugin *process
	round       int
	// disk is the manifest directory as the test wrote it: pod name → GPUs requested.
	disk map[string]int
	// expect holds, per pod name, the GPUs an admitted pod must keep: set from a converged
	// round and from pods/*.json right after a kdm kill; cleared when its manifest is deleted.
	expect map[string][]string
	// history is every action so far, for the failure report.
	history []string
	// kills counts the rounds per kind of kill, and checked the admitted pods whose devices
	// were checked after a round, for the closing summary.
	kills   [4]int
	checked int
}

func (cl *crashLoop) run(rounds int) {
	cl.kdm = cl.startKdm()
	cl.plugin = cl.n.startPlugin()
	cl.settle("start")
	for cl.round = 1; cl.round <= rounds; cl.round++ {
		cl.playRound()
		cl.settle("after the round")
		cl.checked += len(cl.expect)
	}
	cl.t.Logf("%s: %d rounds clean: SIGKILLed kdm in %d, the plugin in %d, both in %d; %d admitted pods' devices checked after a round",
		cl.policy, rounds, cl.kills[killKdm], cl.kills[killPlugin], cl.kills[killBoth], cl.checked)
	cl.kdm.terminate(cl.t)
	cl.n.killPlugins()
}

func (cl *crashLoop) startKdm() *process { return cl.n.startKdm("--policy", cl.policy) }

// settle waits for the node to converge and checks the invariants, then takes the admitted
// pods' devices as the next round's expectations.
func (cl *crashLoop) settle(when string) {
	obs, violations := cl.converge(20 * time.Second)
	if len(violations) > 0 {
		cl.fail(when, obs, violations)
	}
	cl.expect = map[string][]string{}
	for name, devs := range obs.admitted() {
		cl.expect[name] = devs
	}
}

// killKind says which processes a round SIGKILLs.
type killKind int

const (
	killNone killKind = iota
	killKdm
	killPlugin
	killBoth
)

func (k killKind) String() string {
	return [...]string{"none", "kdm", "plugin", "kdm+plugin"}[k]
}

// playRound picks 1-3 manifest actions and maybe a kill placed among them; the actions after
// the kill happen while the killed processes are down.
func (cl *crashLoop) playRound() {
	kill := killKind(0)
	switch p := cl.r.Intn(100); {
	case p < 40:
		kill = killKdm
	case p < 55:
		kill = killPlugin
	case p < 70:
		kill = killBoth
	}
	cl.kills[kill]++
	nFile := 1 + cl.r.Intn(3)
	killAt := cl.r.Intn(nFile + 1)
	for i := 0; i <= nFile; i++ {
		if i == killAt && kill != killNone {
			cl.kill(kill)
		}
		if i < nFile {
			cl.fileAction()
			cl.pause(60)
		}
	}
	if kill != killNone {
		cl.pause(100)
		cl.restart(kill)
	}
}

// pause sleeps up to max milliseconds, often not at all.
func (cl *crashLoop) pause(maxMillis int) {
	if cl.r.Intn(3) == 0 {
		return
	}
	time.Sleep(time.Duration(cl.r.Intn(maxMillis)) * time.Millisecond)
}

func (cl *crashLoop) record(format string, args ...any) {
	cl.history = append(cl.history, fmt.Sprintf("r%d: ", cl.round)+fmt.Sprintf(format, args...))
}

// kill SIGKILLs kdm, the plugin or both. After a kdm kill the pods that pods/*.json records as
// admitted, and whose manifests are on disk, become expectations: they were admitted before
// the kill.
func (cl *crashLoop) kill(k killKind) {
	cl.record("SIGKILL %s", k)
	if k == killPlugin || k == killBoth {
		cl.plugin.kill()
	}
	if k == killKdm || k == killBoth {
		cl.kdm.kill()
		cl.expectFromResults()
	}
}

// restart starts what kill stopped; with both down, in a random order.
func (cl *crashLoop) restart(k killKind) {
	switch k {
	case killKdm:
		cl.kdm = cl.startKdm()
	case killPlugin:
		cl.plugin = cl.n.startPlugin()
	case killBoth:
		if cl.r.Intn(2) == 0 {
			cl.kdm = cl.startKdm()
			cl.pause(50)
			cl.plugin = cl.n.startPlugin()
			cl.record("start kdm, then the plugin")
			return
		}
		cl.plugin = cl.n.startPlugin()
		cl.pause(50)
		cl.kdm = cl.startKdm()
		cl.record("start the plugin, then kdm")
		return
	}
	cl.record("start %s", k)
}

// fileAction creates, deletes, rewrites or edits one manifest.
func (cl *crashLoop) fileAction() {
	var present, absent []string
	for _, name := range crashPods {
		if _, ok := cl.disk[name]; ok {
			present = append(present, name)
		} else {
			absent = append(absent, name)
		}
	}
	p := cl.r.Intn(100)
	if len(present) == 0 || (p < 35 && len(absent) > 0) {
		name, count := absent[cl.r.Intn(len(absent))], 1+cl.r.Intn(3)
		cl.record("create %s (%d GPUs)", name, count)
		cl.writeAtomic(name, count)
		cl.disk[name] = count
		return
	}
	name := present[cl.r.Intn(len(present))]
	switch {
	case p < 55:
		cl.record("delete %s", name)
		if err := os.Remove(cl.manifestPath(name)); err != nil {
			cl.t.Fatalf("seed %d round %d: deleting %s: %v", cl.seed, cl.round, name, err)
		}
		delete(cl.disk, name)
		delete(cl.expect, name)
	case p < 80:
		cl.rewriteInPlace(name, cl.disk[name], "rewrite")
	default:
		count := 1 + (cl.disk[name]+cl.r.Intn(2))%3 // another count in 1..3
		cl.rewriteInPlace(name, count, "edit")
		cl.disk[name] = count
	}
}

func (cl *crashLoop) manifestPath(name string) string {
	return filepath.Join(cl.n.manifests, name+".yaml")
}

// manifest is the pod's manifest, in writePod's form: the UID derives from the name.
func manifest(name string, count int) []byte {
	return []byte(fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: e2e
  uid: %s
spec:
  containers:
  - name: main
    image: example.com/app
    resources:
      limits:
        nvidia.com/gpu: %d
`, name, podUIDOf(name), count))
}

func podUIDOf(name string) string {
	return fmt.Sprintf("00000000-0000-4000-8000-%012x", podNumber(name))
}

// writeAtomic creates a manifest as an operator's tooling would: temp file, then rename.
func (cl *crashLoop) writeAtomic(name string, count int) {
	tmp := filepath.Join(cl.n.manifests, "."+name+".tmp")
	if err := os.WriteFile(tmp, manifest(name, count), 0o600); err != nil {
		cl.t.Fatal(err)
	}
	if err := os.Rename(tmp, cl.manifestPath(name)); err != nil {
		cl.t.Fatal(err)
	}
}

// rewriteInPlace writes the live manifest file in place, as editors and `cat >` do: either
// at once (os.WriteFile truncates, then writes) or in two halves with a pause between, so a
// reader may find the file empty or cut short.
func (cl *crashLoop) rewriteInPlace(name string, count int, verb string) {
	data := manifest(name, count)
	if cl.r.Intn(2) == 0 {
		cl.record("%s %s in place (%d GPUs, one write)", verb, name, count)
		if err := os.WriteFile(cl.manifestPath(name), data, 0o600); err != nil {
			cl.t.Fatal(err)
		}
		return
	}
	cut := 1 + cl.r.Intn(len(data)-1)
	wait := time.Duration(cl.r.Intn(40)) * time.Millisecond
	cl.record("%s %s in place (%d GPUs, two writes cut at byte %d, %v apart)", verb, name, count, cut, wait)
	f, err := os.OpenFile(cl.manifestPath(name), os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		cl.t.Fatal(err)
	}
	_, err1 := f.Write(data[:cut])
	time.Sleep(wait)
	_, err2 := f.Write(data[cut:])
	if err := errors.Join(err1, err2, f.Close()); err != nil {
		cl.t.Fatalf("rewriting %s: %v", name, err)
	}
}

// expectFromResults reads pods/*.json while kdm is down: an admitted pod whose manifest (same
// UID) is on disk must keep those GPUs after the restart. It must also agree with what the
// last converged round saw.
func (cl *crashLoop) expectFromResults() {
	results, err := readPodResults(cl.n.rootDir)
	if err != nil {
		cl.fail("after the kdm kill", nil, []string{fmt.Sprintf("reading pods/*.json: %v", err)})
	}
	for _, r := range results {
		if _, ok := cl.disk[r.Name]; !ok || string(r.UID) != podUIDOf(r.Name) || r.Phase != "Admitted" {
			continue
		}
		devs := resultGPUs(r)
		if prev, ok := cl.expect[r.Name]; ok && !equalStrings(prev, devs) {
			cl.fail("after the kdm kill", nil, []string{fmt.Sprintf(
				"pods/*.json gives pod %s GPUs %v at the kill, but it held %v when the round began", r.Name, devs, prev)})
		}
		cl.expect[r.Name] = devs
	}
}

// fail reports a violation with everything needed to replay and diagnose it, then stops.
func (cl *crashLoop) fail(when string, obs *observation, violations []string) {
	cl.t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "crash loop violation (policy %s, seed %d, round %d, %s); replay with KDM_CRASHLOOP_SEED=%d\n",
		cl.policy, cl.seed, cl.round, when, cl.seed)
	for _, v := range violations {
		fmt.Fprintf(&b, "  VIOLATION: %s\n", v)
	}
	fmt.Fprintf(&b, "actions so far:\n")
	for _, h := range cl.history {
		fmt.Fprintf(&b, "  %s\n", h)
	}
	fmt.Fprintf(&b, "expected to keep their GPUs: %v\n", cl.expect)
	names := make([]string, 0, len(cl.disk))
	for name := range cl.disk {
		names = append(names, name)
	}
	sort.Strings(names)
	fmt.Fprintf(&b, "manifests on disk (pod: GPUs):")
	for _, name := range names {
		fmt.Fprintf(&b, " %s:%d", name, cl.disk[name])
	}
	fmt.Fprintf(&b, "\n")
	if obs != nil {
		b.WriteString(obs.String())
	}
	fmt.Fprintf(&b, "node directory: %s", cl.n.base)
	cl.t.Fatal(b.String())
}
