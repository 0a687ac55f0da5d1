package explore

import (
	"fmt"
	"math/rand"
	"time"

	"github.com/kdm-project/kdm/internal/state"
)

// generator draws the events of a random run from a seeded source.
type generator struct {
	rng  *rand.Rand
	pods int
	// lockstep draws only what the scenario language can say: no plugin faults, no device
	// appearing or vanishing, no removed checkpoint.
	lockstep bool
}

var pluginNames = []string{"gpu", "nic"}

// next chooses the next step: pending work in the manager, or an event from outside.
func (g *generator) next(w *world) Step {
	if pending := w.pending(); len(pending) > 0 && g.rng.Intn(10) < 6 {
		return Step{Task: pending[g.rng.Intn(len(pending))]}
	}
	return Step{Event: g.event(w)}
}

func (g *generator) event(w *world) *Event {
	live := w.livePods()
	for {
		switch r := g.rng.Intn(100); {
		case r < 22 && len(live) < 6:
			g.pods++
			return &Event{Kind: "pod-admit", Name: fmt.Sprintf("p%d", g.pods), Args: g.podSpec(w)}
		case r < 30 && len(live) > 0:
			name := live[g.rng.Intn(len(live))]
			if p := w.pods[name]; g.rng.Intn(2) == 0 && p.live() && p.phase == podAdmitted {
				return &Event{Kind: "pod-complete", Name: name}
			}
			return &Event{Kind: "pod-delete", Name: name}
		case r < 40:
			name := pluginNames[g.rng.Intn(len(pluginNames))]
			if p := w.plugins[name]; p != nil {
				if p.alive && g.rng.Intn(4) > 0 {
					return &Event{Kind: "plugin-stop", Name: name}
				}
				return &Event{Kind: "plugin-start", Name: name} // a running plugin restarts
			}
			var f Faults
			if !g.lockstep {
				f = g.faults()
			}
			return &Event{Kind: "plugin-start", Name: name, Args: []string{fmt.Sprintf("devices=%d", 2+g.rng.Intn(3))}, Faults: f}
		case r < 41:
			if p := g.alivePlugin(w); p != nil {
				return &Event{Kind: "plugin-rolling-update", Name: p.name}
			}
		case r < 44:
			// One instance among several: a rolling update step by step, in either order, and
			// a second Register on one socket.
			p := g.alivePlugin(w)
			if p == nil || len(p.open) == 0 {
				continue
			}
			switch r {
			case 41:
				return &Event{Kind: "plugin-add-instance", Name: p.name}
			case 42:
				c := p.open[g.rng.Intn(len(p.open))]
				return &Event{Kind: "plugin-stop-instance", Name: p.name, Args: []string{fmt.Sprintf("%s-%d.sock", p.name, c.socket)}}
			default:
				return &Event{Kind: "plugin-register-again", Name: p.name}
			}
		case r < 54:
			if p := g.alivePlugin(w); p != nil && len(p.devices) > 0 {
				d := p.devices[g.rng.Intn(len(p.devices))]
				kind := "device-unhealthy"
				if d.Health != "Healthy" {
					kind = "device-healthy"
				}
				return &Event{Kind: kind, Name: p.name, Args: []string{d.ID}}
			}
		case r < 58:
			if p := g.alivePlugin(w); p != nil && !g.lockstep {
				if g.rng.Intn(2) == 0 || len(p.devices) == 0 {
					return &Event{Kind: "device-add", Name: p.name}
				}
				return &Event{Kind: "device-remove", Name: p.name, Args: []string{p.devices[g.rng.Intn(len(p.devices))].ID}}
			}
		case r < 70:
			return &Event{Kind: "kubelet-restart"}
		case r < 76:
			return &Event{Kind: "node-reboot"}
		case r < 92:
			durs := []time.Duration{10 * time.Second, time.Minute, 3 * time.Minute, 6 * time.Minute}
			return &Event{Kind: "advance", Dur: durs[g.rng.Intn(len(durs))]}
		case r < 96:
			return &Event{Kind: "checkpoint-corrupt"}
		default:
			if !g.lockstep {
				return &Event{Kind: "checkpoint-remove"}
			}
		}
	}
}

func (g *generator) alivePlugin(w *world) *simPlugin {
	var alive []*simPlugin
	for _, name := range state.SortedKeys(w.plugins) {
		if p := w.plugins[name]; p.alive {
			alive = append(alive, p)
		}
	}
	if len(alive) == 0 {
		return nil
	}
	return alive[g.rng.Intn(len(alive))]
}

// faults gives a new plugin its misbehaviours: most plugins behave.
func (g *generator) faults() Faults {
	f := Faults{PreferredAvailable: g.rng.Intn(2) == 0}
	switch g.rng.Intn(12) {
	case 0:
		f.FailAllocate = true
	case 1:
		f.FailPreferred, f.PreferredAvailable = true, true
	case 2:
		f.NeverReregister = true
	case 3:
		f.EmptyFirstList = true
	case 4:
		f.ExitOnStreamClosing = true
	}
	return f
}

func (g *generator) podSpec(w *world) []string {
	res := func() string {
		if g.rng.Intn(10) == 0 {
			return "fpga" // a resource no plugin serves
		}
		return pluginNames[g.rng.Intn(len(pluginNames))]
	}
	n := func() int { return 1 + g.rng.Intn(2) }
	switch g.rng.Intn(10) {
	case 0, 1:
		return []string{fmt.Sprintf("init=%s:%d", res(), n()), fmt.Sprintf("app=%s:%d", res(), n())}
	case 2:
		return []string{fmt.Sprintf("sidecar=%s:1", res()), fmt.Sprintf("app=%s:%d", res(), n())}
	case 3:
		return []string{fmt.Sprintf("app=gpu:%d", n()), fmt.Sprintf("app=nic:%d", n())}
	}
	return []string{fmt.Sprintf("%s=%d", res(), n())}
}

// livePods are the pods in the pod source (completed ones included), in arrival order.
func (w *world) livePods() []string {
	var out []string
	for _, name := range w.order {
		if w.pods[name].active() {
			out = append(out, name)
		}
	}
	return out
}
