package explore

import (
	"fmt"
	"io"
	"math/rand"
	"sort"
	"strings"
	"time"

	"github.com/kdm-project/kdm/devicemanager"
)

// Config is one exploration.
type Config struct {
	// Policy names the policy as devicemanager.ParsePolicy takes it: a kubelet minor
	// (a name devicemanager.KubeletVersions lists, alias "kubelet") or "kdm". Required.
	Policy string
	// Seeds is how many random runs to make, with seeds FirstSeed, FirstSeed+1, ... Zero
	// means 1.
	Seeds int
	// FirstSeed is the first run's seed.
	FirstSeed int64
	// Steps bounds each random run. Zero means DefaultSteps.
	Steps int
	// NoRecords simulates an embedder without its own durable record of the assignments
	// (the kubelet): a lost checkpoint then loses them. By default the embedder keeps one,
	// as kdm's agent does.
	NoRecords bool
	// Progress, when set, receives a line about once a second: seeds done, steps/s,
	// violations so far.
	Progress io.Writer
	// Now is the wall clock for progress and throughput; nil means time.Now.
	Now func() time.Time
}

// DefaultSteps is a random run's length when Config.Steps is zero.
const DefaultSteps = 60

// Validate reports what is wrong with the configuration, naming the field.
func (c Config) Validate() error {
	if _, err := devicemanager.ParsePolicy(c.Policy); err != nil {
		return fmt.Errorf("explore: Policy: %w", err)
	}
	if c.Seeds < 0 {
		return fmt.Errorf("explore: Seeds must not be negative, got %d", c.Seeds)
	}
	if c.Steps < 0 {
		return fmt.Errorf("explore: Steps must not be negative, got %d", c.Steps)
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Seeds == 0 {
		c.Seeds = 1
	}
	if c.Steps == 0 {
		c.Steps = DefaultSteps
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Finding is one kind of violation, the first run that showed it, and that run shrunk to a
// script.
type Finding struct {
	Class     string // the invariant, refined by a known upstream issue where one matches
	Violation Violation
	Seed      int64 // the first seed that found it (random runs)
	Count     int   // how many runs found it
	Steps     []Step
	Script    string // the shrunk run in the scenario language
}

// Report sums up an exploration.
type Report struct {
	Policy   string
	Runs     int   // random runs, or executions of a story
	Steps    int64 // simulated steps over all runs
	States   int   // distinct states reached (exhaustive runs)
	Elapsed  time.Duration
	Findings []*Finding // sorted by class
}

// StepsPerSecond is the simulated throughput.
func (r *Report) StepsPerSecond() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Steps) / r.Elapsed.Seconds()
}

// Violations counts runs that broke an invariant.
func (r *Report) Violations() int {
	n := 0
	for _, f := range r.Findings {
		n += f.Count
	}
	return n
}

// Random makes cfg.Seeds random runs and reports each kind of violation once, shrunk.
func Random(cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	policy, _ := devicemanager.ParsePolicy(cfg.Policy)
	rep := &Report{Policy: cfg.Policy}
	found := map[string]*Finding{}
	start := cfg.Now()
	lastProgress := start
	for i := 0; i < cfg.Seeds; i++ {
		seed := cfg.FirstSeed + int64(i)
		trace, v, steps := randomRun(policy, !cfg.NoRecords, seed, cfg.Steps)
		rep.Runs++
		rep.Steps += int64(steps)
		if v != nil {
			noteFinding(found, policy, !cfg.NoRecords, trace, v, seed, fmt.Sprintf("kdm explore --policy %s --seed %d", cfg.Policy, seed))
		}
		if now := cfg.Now(); cfg.Progress != nil && now.Sub(lastProgress) >= time.Second {
			lastProgress = now
			fmt.Fprintf(cfg.Progress, "explore: %d/%d seeds, %.0f steps/s, %d violations\n", i+1, cfg.Seeds,
				float64(rep.Steps)/now.Sub(start).Seconds(), len(found))
		}
	}
	rep.Elapsed = cfg.Now().Sub(start)
	rep.Findings = sortedFindings(found)
	return rep, nil
}

func sortedFindings(found map[string]*Finding) []*Finding {
	out := make([]*Finding, 0, len(found))
	for _, f := range found {
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Class < out[j].Class })
	return out
}

// start is how every run begins: the manager is up and a GPU plugin registers.
func start() []Step {
	return []Step{{Event: &Event{Kind: "plugin-start", Name: "gpu", Args: []string{"devices=4"}}}}
}

// randomRun makes one seeded run and returns its steps, the first violation and how many
// steps it took.
func randomRun(policy devicemanager.Policy, records bool, seed int64, steps int) ([]Step, *Violation, int) {
	w := newWorld(policy, records)
	g := &generator{rng: rand.New(rand.NewSource(seed))}
	trace := start()
	w.exec(trace[0])
	for n := 1; n <= steps; n++ {
		s := g.next(w)
		w.exec(s)
		trace = append(trace, s)
		if v := w.check(); v != nil {
			return trace, v, n
		}
	}
	return trace, nil, steps
}

func (w *world) exec(s Step) {
	w.notes = w.notes[:0]
	if s.Event != nil {
		w.apply(s.Event)
		return
	}
	w.runTask(s.Task)
}

// noteFinding counts v in found under its class or, for a class not found before, shrinks
// trace to the smallest run that still shows it and records that run with its script, whose
// origin line is command (seed is the run's seed, zero for a story's run).
func noteFinding(found map[string]*Finding, policy devicemanager.Policy, records bool, trace []Step, v *Violation, seed int64, command string) {
	if f := found[v.Class]; f != nil {
		f.Count++
		return
	}
	small := shrink(policy, records, trace, v.Class)
	sv := replay(policy, records, small)
	found[v.Class] = &Finding{Class: v.Class, Violation: *sv, Seed: seed, Count: 1, Steps: small,
		Script: Script(small, command, sv)}
}

// replay runs steps from a fresh world and returns the first violation, or nil.
func replay(policy devicemanager.Policy, records bool, steps []Step) *Violation {
	w := newWorld(policy, records)
	for _, s := range steps {
		w.exec(s)
		if v := w.check(); v != nil {
			return v
		}
	}
	return nil
}

// shrink removes steps, pods' containers and requests, and plugin faults, for as long as the
// run still breaks the same class of invariant: the result is a run in which every step,
// container and device asked for matters.
func shrink(policy devicemanager.Policy, records bool, steps []Step, class string) []Step {
	fails := func(c []Step) bool {
		v := replay(policy, records, c)
		return v != nil && v.Class == class
	}
	for n := len(steps) / 2; n >= 1; n /= 2 {
		for i := 0; i+n <= len(steps); {
			cand := append(append([]Step(nil), steps[:i]...), steps[i+n:]...)
			if fails(cand) {
				steps = cand
				continue
			}
			i += n
		}
	}
	// Time that passed only to let pending work run: the scenario runner does that work at
	// once, so the script need not say it.
	for i, s := range steps {
		if s.Event == nil || s.Event.Kind != "advance" {
			continue
		}
		cand := append([]Step(nil), steps...)
		cand[i] = Step{Task: "drain"}
		if fails(cand) {
			steps = cand
		}
	}
	steps = shrinkPods(steps, fails)
	for i, s := range steps {
		if s.Event == nil || s.Event.Faults == (Faults{}) {
			continue
		}
		e := *s.Event
		e.Faults = Faults{}
		cand := append([]Step(nil), steps...)
		cand[i] = Step{Event: &e}
		if fails(cand) {
			steps = cand
		}
	}
	return steps
}

// shrinkPods removes the containers of admitted pods (each container asks for one resource:
// removing it removes that request) and lowers the counts they ask for, for as long as
// fails holds.
func shrinkPods(steps []Step, fails func([]Step) bool) []Step {
	with := func(i int, args []string) []Step {
		e := *steps[i].Event
		e.Args = args
		cand := append([]Step(nil), steps...)
		cand[i] = Step{Event: &e}
		return cand
	}
	for i := range steps {
		if e := steps[i].Event; e == nil || e.Kind != "pod-admit" {
			continue
		}
		for j := 0; j < len(steps[i].Event.Args) && len(steps[i].Event.Args) > 1; {
			args := steps[i].Event.Args
			cand := with(i, append(append([]string(nil), args[:j]...), args[j+1:]...))
			if fails(cand) {
				steps = cand
				continue
			}
			j++
		}
		// A container that must stay (a pod needs an app container) can still drop its
		// request (count 0), or ask for one device.
		for j, a := range steps[i].Event.Args {
			k := strings.LastIndexAny(a, ":=")
			if k < 0 || a[k+1:] == "0" {
				continue
			}
			for _, n := range []string{"0", "1"} {
				args := append([]string(nil), steps[i].Event.Args...)
				args[j] = a[:k+1] + n
				if cand := with(i, args); args[j] != a && fails(cand) {
					steps = cand
					break
				}
			}
		}
	}
	return steps
}
