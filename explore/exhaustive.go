package explore

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kdm-project/kdm/devicemanager"
	"github.com/kdm-project/kdm/scenario"
)

// ParseStory reads a scenario script (the scenario language) as the events of a story.
// Queries (capacity, allocations, checkpoint) and `kubelet start` are dropped; a legacy
// checkpoint file is read now, relative to the script.
func ParseStory(path string) ([]*Event, error) {
	dirs, err := scenario.ParseFile(path)
	if err != nil {
		return nil, err
	}
	var out []*Event
	for _, d := range dirs {
		arg := func(i int) string {
			if i < len(d.Args) {
				return d.Args[i]
			}
			return ""
		}
		var e *Event
		switch d.Cmd + " " + arg(0) {
		case "kubelet start", "capacity ", "allocations ", "checkpoint ":
			continue
		case "kubelet restart":
			e = &Event{Kind: "kubelet-restart"}
		case "node reboot":
			e = &Event{Kind: "node-reboot"}
		case "plugin add-instance", "plugin register-again":
			if arg(1) == "" {
				return nil, fmt.Errorf("%s:%d: plugin %s needs a plugin name", path, d.Line, arg(0))
			}
			e = &Event{Kind: "plugin-" + arg(0), Name: arg(1)}
		case "plugin stop-instance":
			if _, ok := socketNumber(arg(1), arg(2)); !ok || len(d.Args) != 3 {
				return nil, fmt.Errorf("%s:%d: plugin stop-instance needs a plugin name and one of its sockets, NAME-n.sock", path, d.Line)
			}
			e = &Event{Kind: "plugin-stop-instance", Name: arg(1), Args: []string{arg(2)}}
		case "plugin start", "plugin stop", "plugin rolling-update":
			e = &Event{Kind: "plugin-" + arg(0), Name: arg(1), Args: d.Args[min(2, len(d.Args)):]}
			if arg(1) == "" {
				return nil, fmt.Errorf("%s:%d: plugin %s needs a plugin name", path, d.Line, arg(0))
			}
			for _, a := range e.Args {
				v, ok := strings.CutPrefix(a, "devices=")
				if n, err := strconv.Atoi(v); !ok || err != nil || n < 0 {
					return nil, fmt.Errorf("%s:%d: plugin %s: bad argument %q (want devices=N)", path, d.Line, arg(1), a)
				}
			}
		case "plugin restart":
			out = append(out, &Event{Kind: "plugin-stop", Name: arg(1)})
			e = &Event{Kind: "plugin-start", Name: arg(1)}
		case "device healthy", "device unhealthy":
			e = &Event{Kind: "device-" + arg(0), Name: arg(1), Args: []string{arg(2)}}
		case "pod admit", "pod delete", "pod complete":
			e = &Event{Kind: "pod-" + arg(0), Name: arg(1), Args: d.Args[min(2, len(d.Args)):]}
			if arg(0) == "admit" {
				var kept []string
				for _, a := range e.Args {
					if a == scenario.CrashAtAllocate {
						e.crashAtAllocate = true
						continue
					}
					kept = append(kept, a)
				}
				e.Args = kept
			}
			if arg(1) == "" {
				return nil, fmt.Errorf("%s:%d: %s %s needs a pod name", path, d.Line, d.Cmd, arg(0))
			}
			if arg(0) == "admit" {
				if _, err := scenario.ParsePodSpec(e.Args); err != nil {
					return nil, fmt.Errorf("%s:%d: pod %s: %w", path, d.Line, arg(1), err)
				}
			}
		case "advance " + arg(0):
			dur, err := time.ParseDuration(arg(0))
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %w", path, d.Line, err)
			}
			e = &Event{Kind: "advance", Dur: dur}
		case "checkpoint corrupt":
			e = &Event{Kind: "checkpoint-corrupt"}
		case "checkpoint legacy-v1":
			file := arg(1)
			if !filepath.IsAbs(file) {
				file = filepath.Join(filepath.Dir(path), file)
			}
			b, err := os.ReadFile(file)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %w", path, d.Line, err)
			}
			e = &Event{Kind: "checkpoint-legacy", Args: []string{arg(1)}, data: b}
		default:
			return nil, fmt.Errorf("%s:%d: explore does not know %q", path, d.Line, strings.TrimSpace(d.Cmd+" "+strings.Join(d.Args, " ")))
		}
		out = append(out, e)
	}
	return out, nil
}

// chooser makes the choices of a story's run: which pending work goes next, and where the
// manager crashes. It replays a prefix of choices and takes the first option after it,
// recording how many options each choice had, so that a depth-first walk visits every run.
type chooser struct {
	prefix []int
	arity  []int
	pos    int
	replay int // choices replayed from the previous run; the last of them is new
}

// fresh reports whether the run has left the path of the previous one: its states from here
// on have not been seen on that path.
func (c *chooser) fresh() bool { return c.pos >= c.replay }

func (c *chooser) choose(n int) int {
	if n <= 1 {
		return 0
	}
	if c.pos == len(c.prefix) {
		c.prefix = append(c.prefix, 0)
		c.arity = append(c.arity, n)
	}
	c.arity[c.pos] = n
	choice := c.prefix[c.pos]
	c.pos++
	return choice
}

// next moves to the next unvisited run; false when every run has been made.
func (c *chooser) next() bool {
	c.prefix, c.arity = c.prefix[:c.pos], c.arity[:c.pos]
	for i := len(c.prefix) - 1; i >= 0; i-- {
		if c.prefix[i]+1 < c.arity[i] {
			c.prefix[i]++
			c.prefix, c.arity = c.prefix[:i+1], c.arity[:i+1]
			c.pos, c.replay = 0, i+1
			return true
		}
	}
	return false
}

// storyRun makes one run of a story under the chooser's choices: the story's events in
// order, each once the manager has no work it can do; before each step, all pending work in
// any order; and at most one crash of the manager (a kubelet restart) at any step boundary.
//
// A run ends early, without a violation, when it reaches a state seen already (seen): every
// continuation from there has been or will be walked from its first visit.
func storyRun(policy devicemanager.Policy, records bool, story []*Event, ch *chooser, seen map[uint64]bool) ([]Step, *Violation) {
	prune := seen != nil
	w := newWorld(policy, records)
	var trace []Step
	next, crashed := 0, false
	for {
		opts := w.pending()
		steps := make([]Step, 0, len(opts)+2)
		for _, id := range opts {
			steps = append(steps, Step{Task: id})
		}
		if len(opts) == 0 && next < len(story) {
			steps = append(steps, Step{Event: story[next]})
		}
		if len(steps) == 0 {
			return trace, nil
		}
		if !crashed {
			steps = append(steps, Step{Event: &Event{Kind: "kubelet-restart", crash: true}})
		}
		s := steps[ch.choose(len(steps))]
		switch {
		case s.Event != nil && s.Event.crash:
			crashed = true
		case s.Event != nil:
			next++
		}
		w.exec(s)
		trace = append(trace, s)
		if v := w.check(); v != nil {
			return trace, v
		}
		if !prune || !ch.fresh() {
			continue // replaying the previous run's path: its states are seen already
		}
		key := w.fingerprint(fmt.Sprintf("next=%d crashed=%v", next, crashed))
		if seen[key] {
			return trace, nil
		}
		seen[key] = true
	}
}

// Exhaustive makes every run of the story: every crash point, every order of the work a
// restart leaves pending (re-admissions, plugins registering again). It stops after
// maxRuns runs (0: no bound) and reports each kind of violation once, with the run shrunk.
func Exhaustive(cfg Config, storyPath string, maxRuns int) (*Report, error) {
	return exhaustive(cfg, storyPath, maxRuns, true)
}

// exhaustive is Exhaustive; without prune it walks every run, even through states it has
// seen (to check that leaving them loses nothing).
func exhaustive(cfg Config, storyPath string, maxRuns int, prune bool) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	policy, _ := devicemanager.ParsePolicy(cfg.Policy)
	story, err := ParseStory(storyPath)
	if err != nil {
		return nil, err
	}
	rep := &Report{Policy: cfg.Policy}
	found := map[string]*Finding{}
	ch := &chooser{}
	var seen map[uint64]bool
	if prune {
		seen = map[uint64]bool{}
	}
	begin := cfg.Now()
	lastProgress := begin
	for {
		trace, v := storyRun(policy, !cfg.NoRecords, story, ch, seen)
		rep.Runs++
		rep.States = len(seen)
		rep.Steps += int64(len(trace))
		if v != nil {
			noteFinding(found, policy, !cfg.NoRecords, trace, v, 0,
				fmt.Sprintf("kdm explore --policy %s --story %s --exhaustive", cfg.Policy, filepath.Base(storyPath)))
		}
		if now := cfg.Now(); cfg.Progress != nil && now.Sub(lastProgress) >= time.Second {
			lastProgress = now
			fmt.Fprintf(cfg.Progress, "explore: %s: %d runs, %.0f steps/s, %d violations\n", filepath.Base(storyPath), rep.Runs,
				float64(rep.Steps)/now.Sub(begin).Seconds(), len(found))
		}
		if (maxRuns > 0 && rep.Runs >= maxRuns) || !ch.next() {
			break
		}
	}
	rep.Elapsed = cfg.Now().Sub(begin)
	rep.Findings = sortedFindings(found)
	return rep, nil
}
