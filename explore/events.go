package explore

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/internal/state"
	"github.com/kdm-project/kdm/scenario"
)

// Event is one thing that happens to the node from outside the manager. Kinds and the
// scenario line each prints as:
//
//	plugin-start NAME devices=N   plugin start NAME devices=N
//	plugin-stop NAME              plugin stop NAME
//	plugin-rolling-update NAME    plugin rolling-update NAME (a new process registers, then the old one exits)
//	plugin-add-instance NAME      plugin add-instance NAME (a new process registers; the others keep running)
//	plugin-stop-instance NAME S   plugin stop-instance NAME NAME-S.sock (the process serving that socket exits)
//	plugin-register-again NAME    plugin register-again NAME (the newest process registers its socket again)
//	device-unhealthy NAME ID      device unhealthy NAME ID (and device-healthy)
//	device-add NAME, device-remove NAME ID   (no scenario line: printed as a comment)
//	pod-admit NAME SPEC...        pod admit NAME SPEC...
//	pod-delete NAME, pod-complete NAME
//	kubelet-restart               kubelet restart (a crash: nothing is written on the way down)
//	node-reboot                   node reboot
//	advance DURATION              advance DURATION
//	checkpoint-corrupt            checkpoint corrupt
//	checkpoint-remove             (no scenario line: printed as a comment)
type Event struct {
	Kind   string
	Name   string
	Args   []string
	Faults Faults
	Dur    time.Duration

	crash bool   // a restart the explorer inserted (a crash), not one of the story's
	data  []byte // checkpoint-legacy: the file's content
	// crashAtAllocate (pod-admit): the manager crashes once the pod's first selection is
	// made, while the plugin's Allocate is in flight (scenario.CrashAtAllocate).
	crashAtAllocate bool
	// during (kubelet-restart): the pod whose admission was between its first selection and
	// the plugin's answer when the manager restarted, as the last run found it; "" for none.
	during string
}

// Step is one step of a run: an event, or the next step of pending work inside the manager
// (an admission, a plugin's re-registration or delayed list), named by Task.
type Step struct {
	Event *Event
	Task  string
}

type taskKind int

const (
	taskRegister taskKind = iota // a live plugin registers again after a manager restart
	taskList                     // a plugin sends the list it held back (EmptyFirstList)
)

type task struct {
	kind     taskKind
	plugin   string
	instance int
}

func (t task) id() string {
	if t.kind == taskRegister {
		return "register " + t.plugin
	}
	return "list " + t.plugin
}

// pending returns the IDs of the work that can take a step now, in a stable order:
// admissions in start order, then tasks in creation order.
func (w *world) pending() []string {
	var out []string
	for _, a := range w.admissions {
		if w.runnable(a) {
			out = append(out, "admit "+a.pod.name)
		}
	}
	for _, t := range w.tasks {
		out = append(out, t.id())
	}
	return out
}

// runTask takes one step of the named work; it reports false when there is no such work.
func (w *world) runTask(id string) bool {
	kind, name, _ := strings.Cut(id, " ")
	switch kind {
	case "drain":
		w.drain()
		return true
	case "admit":
		for _, a := range w.admissions {
			if a.pod.name == name && w.runnable(a) {
				w.step(a)
				return true
			}
		}
	case "register", "list":
		for i, t := range w.tasks {
			if t.id() != id {
				continue
			}
			w.tasks = append(w.tasks[:i], w.tasks[i+1:]...)
			p := w.plugins[t.plugin]
			if p == nil || !p.alive {
				return true
			}
			if t.kind == taskRegister {
				w.connect(p, p.newSocket()) // the scenario runner restarts the process on a new socket
				w.note("%s plugin registered again", p.resource())
			} else if p.instance == t.instance {
				w.sendList(p)
				w.note("%s plugin sent its device list", p.resource())
			}
			return true
		}
	}
	return false
}

// apply performs an event. Events that make no sense in the current world (a plugin that
// does not exist, a pod already gone) do nothing, so that a shrunk run stays valid.
func (w *world) apply(e *Event) {
	switch e.Kind {
	case "plugin-start":
		p := w.plugins[e.Name]
		if p == nil {
			n := 4
			for _, a := range e.Args {
				if v, ok := strings.CutPrefix(a, "devices="); ok {
					n, _ = strconv.Atoi(v)
				}
			}
			p = &simPlugin{name: e.Name, faults: e.Faults}
			for i := 0; i < n; i++ {
				p.devices = append(p.devices, &pluginapi.Device{ID: fmt.Sprintf("%s-%d", e.Name, i), Health: pluginapi.Healthy})
			}
			w.plugins[e.Name] = p
		}
		if p.alive && legacy.startAdds {
			w.connect(p, p.newSocket())
			w.note("%s: another instance registered", p.resource())
			return
		}
		if p.alive {
			w.stopPlugin(p)
		}
		p.alive = true
		w.connect(p, p.newSocket())
		w.note("%s registered with %d devices", p.resource(), len(p.devices))
	case "plugin-stop":
		if p := w.plugins[e.Name]; p != nil && p.alive {
			w.stopPlugin(p)
			w.note("%s plugin exited", p.resource())
		}
	case "plugin-rolling-update":
		if p := w.plugins[e.Name]; p != nil && p.alive {
			old := p.newestSocket()
			w.connect(p, p.newSocket())
			if old != 0 {
				w.closeSocket(p, old)
			}
			w.note("%s: a new instance registered, then the old one exited", p.resource())
		}
	case "plugin-add-instance":
		if p := w.plugins[e.Name]; p != nil && p.alive {
			w.connect(p, p.newSocket())
			w.note("%s: a new instance registered while the others run", p.resource())
		}
	case "plugin-stop-instance":
		if p := w.plugins[e.Name]; p != nil && p.alive && len(e.Args) == 1 {
			if n, ok := socketNumber(e.Name, e.Args[0]); ok && slices.ContainsFunc(p.open, func(c conn) bool { return c.socket == n }) {
				w.closeSocket(p, n)
				w.note("%s: the instance on %s exited", p.resource(), e.Args[0])
			}
		}
	case "plugin-register-again":
		if p := w.plugins[e.Name]; p != nil && p.alive && len(p.open) > 0 {
			if w.rules.Register(true) == state.RegisterRefuseSameSocket {
				w.note("%s: the second Register on one socket is refused", p.resource())
				return
			}
			w.connect(p, p.newestSocket())
			w.note("%s: registered again on its socket", p.resource())
		}
	case "device-unhealthy", "device-healthy":
		health := pluginapi.Unhealthy
		if e.Kind == "device-healthy" {
			health = pluginapi.Healthy
		}
		if p := w.plugins[e.Name]; p != nil && len(e.Args) == 1 {
			for _, d := range p.devices {
				if d.ID == e.Args[0] {
					d.Health = health
				}
			}
			p.version++
			if p.listed {
				w.sendList(p)
			}
		}
	case "device-add":
		if p := w.plugins[e.Name]; p != nil {
			p.added++
			p.devices = append(p.devices, &pluginapi.Device{ID: fmt.Sprintf("%s-new%d", p.name, p.added), Health: pluginapi.Healthy})
			p.version++
			if p.listed {
				w.sendList(p)
			}
		}
	case "device-remove":
		if p := w.plugins[e.Name]; p != nil && len(e.Args) == 1 {
			for i, d := range p.devices {
				if d.ID == e.Args[0] {
					p.devices = append(p.devices[:i], p.devices[i+1:]...)
					break
				}
			}
			p.version++
			if p.listed {
				w.sendList(p)
			}
		}
	case "pod-admit":
		if _, ok := w.pods[e.Name]; ok {
			return
		}
		p, err := parsePod(e.Name, e.Args)
		if err != nil {
			w.note("bad pod: %v", err)
			return
		}
		w.pods[e.Name] = p
		w.order = append(w.order, e.Name)
		a := &admission{pod: p}
		w.admissions = append(w.admissions, a)
		if e.crashAtAllocate {
			w.crashAtAllocate(a)
		}
	case "pod-delete":
		p := w.pods[e.Name]
		if p == nil || p.phase == podDeleted {
			return // a rejected pod's object is deleted too; it held nothing
		}
		w.abandonAdmission(p)
		p.running, p.phase = false, podDeleted
		w.gc()
	case "pod-complete":
		// Only a pod whose containers run can complete (the scenario runner's rule too).
		p := w.pods[e.Name]
		if p == nil || !p.live() || p.phase != podAdmitted {
			return
		}
		p.running, p.completed = false, true
		if !fate(state.PodCompleted).Active {
			p.phase = podDeleted
		}
		w.gc()
	case "kubelet-restart":
		e.during = w.allocating()
		w.restart(false)
	case "node-reboot":
		w.restart(true)
	case "advance":
		w.advance(e.Dur)
	case "checkpoint-corrupt":
		if b := w.file(); b != nil {
			w.setFile(b[:len(b)/2])
		}
	case "checkpoint-remove":
		w.setFile(nil)
	case "checkpoint-legacy":
		w.setFile(e.data)
	}
}

// advance lets time pass. Work the manager can do now is done first: RPCs and writes take
// milliseconds, not minutes. Then the clock moves to each timer that fires on the way (a
// deferred admission's timeout, the end of a grace period it waits out), and the admission
// that waited runs at that time; the node status loop removes expired resources and writes.
func (w *world) advance(d time.Duration) {
	w.drain()
	target := w.now.Add(d)
	for {
		next, ok := w.nextTimer()
		if !ok || next.After(target) {
			break
		}
		w.now = next
		w.expire()
		w.drain()
	}
	w.now = target
	w.expire()
	w.drain()
}

// drain runs every runnable step until none is left (bounded): the first pending one each
// time, or the one w.choose picks.
func (w *world) drain() {
	for i := 0; i < 10000; i++ {
		pending := w.pending()
		if len(pending) == 0 {
			return
		}
		if w.choose == nil {
			w.runTask(pending[0])
			continue
		}
		w.runContainer(pending[w.choose(len(pending))])
	}
}

// runContainer runs the named work; for an admission, up to the end of its current
// container (its last container: to the end of the admission) or until it waits: the unit
// whose order the lockstep check chooses.
func (w *world) runContainer(id string) {
	var a *admission
	for _, x := range w.admissions {
		if "admit "+x.pod.name == id {
			a = x
		}
	}
	if a == nil {
		w.runTask(id)
		return
	}
	ci := a.ci
	for i := 0; i < 100 && w.runTask(id); i++ {
		if (a.ci != ci && a.ci < len(a.pod.containers)) || !slices.Contains(w.admissions, a) || !w.runnable(a) {
			return
		}
	}
}

// nextTimer returns the earliest moment at which a waiting admission must look again.
func (w *world) nextTimer() (time.Time, bool) {
	var next time.Time
	found := false
	consider := func(t time.Time) {
		if t.After(w.now) && (!found || t.Before(next)) {
			next, found = t, true
		}
	}
	for _, a := range w.admissions {
		if t, ok := w.wakeAt(a); ok {
			consider(t)
		}
	}
	return next, found
}

// expire is GetCapacity's removal of resources whose grace period is over, with its write.
func (w *world) expire() {
	if removed := w.st.Capacity(w.now, w.grace(), nil); len(removed) > 0 {
		w.writeCheckpoint()
	}
}

// stopPlugin ends every process of the plugin: their streams close, and its devices turn
// unhealthy.
func (w *world) stopPlugin(p *simPlugin) {
	w.closeSocket(p, 0)
	p.alive, p.listed = false, false
	w.removeTasks(p.name)
}

// socketNumber returns n for the scenario runner's socket name NAME-n.sock.
func socketNumber(name, socket string) (int, bool) {
	v, ok := strings.CutPrefix(socket, name+"-")
	if !ok {
		return 0, false
	}
	v, ok = strings.CutSuffix(v, ".sock")
	n, err := strconv.Atoi(v)
	return n, ok && err == nil && n > 0
}

func (w *world) removeTasks(plugin string) {
	kept := w.tasks[:0]
	for _, t := range w.tasks {
		if t.plugin != plugin {
			kept = append(kept, t)
		}
	}
	w.tasks = kept
}

// restart crashes the manager and starts a new one: what was not written is lost, every
// in-flight admission with it. On a kubelet restart the containers keep running and live
// plugins register again (in an order the scheduler chooses, interleaved with the pods'
// re-admission); on a node reboot nothing runs and every plugin is down until started.
func (w *world) restart(reboot bool) {
	var running []state.ContainerKey
	for _, name := range w.order {
		p := w.pods[name]
		if reboot {
			p.running = false
		}
		if !p.running || !p.live() {
			continue
		}
		for _, c := range p.containers {
			if !c.regularInit {
				running = append(running, state.ContainerKey{PodUID: p.uid, ContainerName: c.name})
			}
		}
	}
	names := sortedPlugins(w.plugins)
	for _, name := range names {
		p := w.plugins[name]
		p.listed, p.open = false, nil // the manager's connections end with it
		if reboot || p.faults.ExitOnStreamClosing {
			p.alive = false
		}
	}
	w.startManager(running)
	w.rebooted = reboot
	w.sourcesReady = false
	for _, name := range w.order {
		if p := w.pods[name]; p.active() && (!p.completed || fate(state.PodCompleted).Readmit) {
			p.phase = podPending
			w.admissions = append(w.admissions, &admission{pod: p, readmit: true})
		}
	}
	for _, name := range names {
		if p := w.plugins[name]; p.alive && !p.faults.NeverReregister {
			w.tasks = append(w.tasks, task{kind: taskRegister, plugin: name})
		}
	}
	if reboot {
		w.note("node rebooted: the manager started from the checkpoint; no container runs; plugins are down")
	} else {
		w.note("the manager restarted from the checkpoint; containers keep running")
	}
	w.checkSourcesReady()
}

// abandonAdmission ends the pod's admission in flight, if any, releasing what it reserved.
func (w *world) abandonAdmission(p *simPod) {
	for _, a := range w.admissions {
		if a.pod == p {
			if a.steps != nil {
				a.steps.Abandon(w.st)
			}
			w.removeAdmission(a)
			return
		}
	}
}

func sortedPlugins(m map[string]*simPlugin) []string { return state.SortedKeys(m) }

// parsePod builds a pod from the arguments of the scenario language's `pod admit`
// (scenario.ParsePodSpec): init containers and sidecars first, in order, then app containers.
func parsePod(name string, args []string) (*simPod, error) {
	specs, err := scenario.ParsePodSpec(args)
	if err != nil {
		return nil, err
	}
	p := &simPod{name: name, uid: "uid-" + name, spec: args}
	var inits, apps []simContainer
	for _, cs := range specs {
		c := simContainer{name: cs.Name, regularInit: cs.Kind == scenario.InitContainer,
			requests: map[string]int{domain + cs.Resource: cs.Count}}
		if cs.Kind == scenario.AppContainer {
			apps = append(apps, c)
		} else {
			inits = append(inits, c)
		}
	}
	p.containers = append(inits, apps...)
	return p, nil
}

// crashAtAllocate runs the admission up to its first selection of devices and crashes the
// manager there, before the plugin's Allocate answers (scenario.CrashAtAllocate). An
// admission that ends or waits first is left as it is.
func (w *world) crashAtAllocate(a *admission) {
	for i := 0; i < 100 && slices.Contains(w.admissions, a) && w.runnable(a); i++ {
		if w.allocating() == a.pod.name {
			w.note("%s: the manager crashes while the plugin's Allocate call is in flight", a.pod.name)
			w.restart(false)
			return
		}
		w.step(a)
	}
}

// allocating names the pod whose admission is in its first container, between a selection
// and the plugin's answer, while no other admission holds anything: the moment
// `pod admit ... crash=allocate` crashes at. "" when there is none.
func (w *world) allocating() string {
	var out string
	for _, a := range w.admissions {
		picks := a.picks()
		if len(picks) == 0 {
			continue
		}
		if out != "" || a.ci != 0 || picks[len(picks)-1].Response != nil {
			return ""
		}
		out = a.pod.name
	}
	return out
}
