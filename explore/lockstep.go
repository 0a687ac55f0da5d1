package explore

import (
	"fmt"
	"io"
	"math/rand"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/kdm-project/kdm/devicemanager"
	"github.com/kdm-project/kdm/internal/state"
	"github.com/kdm-project/kdm/scenario"
)

// LockstepConfig is one lockstep check: random runs, each made by the simulator and, step
// for step, by the real manager (package scenario's Runner: real gRPC to in-process plugins
// over unix sockets, a real checkpoint file, a fake clock), comparing what can be seen of
// the two after every step.
type LockstepConfig struct {
	// Policy, Seeds, FirstSeed and NoRecords are Config's.
	Policy    string
	Seeds     int
	FirstSeed int64
	NoRecords bool
	// Steps bounds each run. Zero means DefaultLockstepSteps.
	Steps int
	// Progress, when set, receives a line about once a second.
	Progress io.Writer
	// Now is the wall clock for progress; nil means time.Now.
	Now func() time.Time
}

// DefaultLockstepSteps is a lockstep run's length when LockstepConfig.Steps is zero: each
// step of the real manager costs real sockets and files.
const DefaultLockstepSteps = 20

// Divergence is the first step after which the simulator and the manager disagree.
type Divergence struct {
	Seed int64
	// Steps is the run up to and including the step that diverged, shrunk: every step in
	// it is needed for the two to disagree.
	Steps []Step
	// Script is Steps in the scenario language.
	Script string
	// Sim and Manager are what each showed after the last step; Err is the manager's
	// error when a command failed there.
	Sim, Manager scenario.Observation
	Err          error
}

// kind is what a shrunk run must keep: the manager's error, or which parts of the
// observations differ.
func (d *Divergence) kind() string {
	if d.Err != nil {
		return "error: " + d.Err.Error()
	}
	var parts []string
	for _, x := range []struct {
		name     string
		sim, mgr []string
	}{{"pods", d.Sim.Pods, d.Manager.Pods}, {"allocations", d.Sim.Allocations, d.Manager.Allocations},
		{"capacity", d.Sim.Capacity, d.Manager.Capacity}, {"checkpoint", d.Sim.Checkpoint, d.Manager.Checkpoint}} {
		if strings.Join(x.sim, "\n") != strings.Join(x.mgr, "\n") {
			parts = append(parts, x.name)
		}
	}
	return strings.Join(parts, ",")
}

func (d *Divergence) Error() string {
	if d.Err != nil {
		return fmt.Sprintf("seed %d: the manager failed where the simulator went on: %v\n%s", d.Seed, d.Err, d.Script)
	}
	return fmt.Sprintf("seed %d: the simulator and the manager disagree after the last step\nsimulator:\n%smanager:\n%s\n%s", d.Seed,
		d.Sim, d.Manager, d.Script)
}

// LockstepReport sums up a lockstep check.
type LockstepReport struct {
	Policy     string
	Runs       int
	Steps      int64
	Elapsed    time.Duration
	Divergence *Divergence // the first one found, shrunk; nil when none
}

// Lockstep makes cfg.Seeds random runs in lockstep and stops at the first divergence.
func Lockstep(cfg LockstepConfig) (*LockstepReport, error) {
	if err := (Config{Policy: cfg.Policy, Seeds: cfg.Seeds}).Validate(); err != nil {
		return nil, err
	}
	if cfg.Seeds == 0 {
		cfg.Seeds = 1
	}
	if cfg.Steps <= 0 {
		cfg.Steps = DefaultLockstepSteps
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	rep := &LockstepReport{Policy: cfg.Policy}
	start := cfg.Now()
	last := start
	for i := 0; i < cfg.Seeds; i++ {
		seed := cfg.FirstSeed + int64(i)
		events := lockstepEvents(cfg.Policy, !cfg.NoRecords, seed, cfg.Steps)
		n, d, err := runLockstep(cfg.Policy, !cfg.NoRecords, events)
		if err != nil {
			return nil, err
		}
		rep.Runs++
		rep.Steps += int64(n)
		if d != nil {
			d.Seed = seed
			rep.Divergence = shrinkDivergence(cfg.Policy, !cfg.NoRecords, events[:n], d)
			d := rep.Divergence
			d.Seed = seed
			d.Script = Script(d.Steps, fmt.Sprintf("kdm explore lockstep --policy %s --seed %d", cfg.Policy, seed), nil)
			break
		}
		if now := cfg.Now(); cfg.Progress != nil && now.Sub(last) >= time.Second {
			last = now
			fmt.Fprintf(cfg.Progress, "lockstep: %s: %d/%d seeds, %d steps\n", cfg.Policy, i+1, cfg.Seeds, rep.Steps)
		}
	}
	rep.Elapsed = cfg.Now().Sub(start)
	return rep, nil
}

// lockstepEvents draws a random run's events as the simulator plays them, leaving out what
// the scenario language cannot say (plugin faults, devices appearing or vanishing, a removed
// checkpoint). Pending work runs to its end after every event, as the scenario runner does.
func lockstepEvents(policy string, records bool, seed int64, steps int) []Step {
	pol, _ := devicemanager.ParsePolicy(policy)
	w := newWorld(pol, records)
	g := &generator{rng: rand.New(rand.NewSource(seed)), lockstep: true}
	out := start()
	w.exec(out[0])
	w.drain()
	for len(out) < steps {
		s := Step{Event: g.event(w)}
		w.exec(s)
		w.drain()
		out = append(out, s)
	}
	return out
}

// runLockstep plays events in both drivers and returns how many it played and the first
// divergence (nil when none). An error is the runner's own failure to start.
//
// The manager runs the admissions that one change wakes (and a plugin registering meanwhile)
// concurrently, in an order nobody chooses. After each step the simulator therefore tries the
// orders of the work that step left pending (drain), replaying the run from the start with the
// orders already matched, and the step diverges only when no order shows what the manager
// shows.
func runLockstep(policy string, records bool, events []Step) (int, *Divergence, error) {
	pol, _ := devicemanager.ParsePolicy(policy)
	r, err := scenario.New(scenario.Config{Policy: policy, Records: records})
	if err != nil {
		return 0, nil, err
	}
	defer r.Close()
	if _, err := r.Do("kubelet", []string{"start"}); err != nil {
		return 0, nil, err
	}
	var orders [][]int // per step played, the drain choices that matched the manager
	for i, s := range events {
		line, _ := s.Event.scenarioLine()
		var rerr error
		if f := strings.Fields(line); len(f) > 0 {
			_, rerr = r.Do(f[0], f[1:])
		}
		var real scenario.Observation
		if rerr == nil {
			real = r.Observe()
		}
		ch := &chooser{}
		var first *scenario.Observation
		for tries := 0; ; tries++ {
			sim := simulate(pol, records, events[:i+1], orders, ch)
			if first == nil {
				first = &sim
			}
			if rerr != nil {
				return i + 1, &Divergence{Steps: events[:i+1], Sim: sim, Err: rerr}, nil
			}
			if sim.String() == real.String() {
				orders = append(orders, append([]int(nil), ch.prefix[:ch.pos]...))
				break
			}
			if tries == maxOrders || !ch.next() {
				return i + 1, &Divergence{Steps: events[:i+1], Sim: *first, Manager: real}, nil
			}
		}
	}
	return len(events), nil, nil
}

// maxOrders bounds the orders of pending work tried after one step.
const maxOrders = 500

// simulate plays events in a fresh simulation, each followed by its pending work, in the
// order orders gives for the steps before the last and ch chooses for the last one, and by an
// observation (which, like the manager's, removes expired resources); it returns the last
// observation.
func simulate(policy devicemanager.Policy, records bool, events []Step, orders [][]int, ch *chooser) scenario.Observation {
	w := newWorld(policy, records)
	var o scenario.Observation
	for j, s := range events {
		if j < len(orders) {
			replay := &chooser{prefix: orders[j], arity: make([]int, len(orders[j]))}
			w.choose = replay.choose
		} else {
			ch.pos = 0
			w.choose = ch.choose
		}
		w.exec(s)
		w.drain()
		w.choose = nil
		o = w.observe()
	}
	return o
}

// shrinkDivergence removes steps for as long as the two drivers still disagree in the same
// way (Divergence.kind); every candidate is played in both. The first step (the GPU
// plugin's start) stays.
func shrinkDivergence(policy string, records bool, steps []Step, d *Divergence) *Divergence {
	best := d
	kind := d.kind()
	try := func(c []Step) bool {
		n, dd, err := runLockstep(policy, records, c)
		if err != nil || dd == nil || dd.kind() != kind {
			return false
		}
		best = dd
		best.Steps = c[:n]
		return true
	}
	budget := 300 // each try costs real sockets and files
	for n := len(steps) / 2; n >= 1 && budget > 0; n /= 2 {
		for i := 1; i+n <= len(steps) && budget > 0; {
			budget--
			cand := append(append([]Step(nil), steps[:i]...), steps[i+n:]...)
			if try(cand) {
				steps = best.Steps
				continue
			}
			i += n
		}
	}
	return best
}

// observe is what the scenario runner's Observe shows of the real manager, taken from the
// simulation: pods, allocations, capacity (removing expired resources, as GetCapacity does,
// with its write) and the checkpoint file.
func (w *world) observe() scenario.Observation {
	var o scenario.Observation
	removed := w.st.Capacity(w.now, w.grace(), func(res string, c state.Counts) {
		o.Capacity = append(o.Capacity, fmt.Sprintf("%s %d/%d", res, c.Capacity, c.Allocatable))
	})
	if len(removed) > 0 {
		w.writeCheckpoint()
	}
	sort.Strings(o.Capacity)
	for _, name := range w.order {
		p := w.pods[name]
		o.Pods = append(o.Pods, scenario.PodLine(name, p.phase.String(), p.running, p.completed, p.reason))
		if !p.active() {
			continue
		}
		for _, c := range p.containers {
			for _, e := range w.st.ContainerEntries(p.uid, c.name) {
				ids := sets.New[string]()
				for _, l := range e.DeviceIDs {
					ids.Insert(l...)
				}
				o.Allocations = append(o.Allocations, fmt.Sprintf("%s/%s %s %s", name, c.name, e.ResourceName, sortedIDs(ids)))
			}
		}
	}
	sort.Strings(o.Allocations)
	o.Checkpoint = scenario.CheckpointLines(w.file())
	return o
}
