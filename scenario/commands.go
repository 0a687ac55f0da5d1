package scenario

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/checkpoint"
	"github.com/kdm-project/kdm/devicemanager"
	"github.com/kdm-project/kdm/internal/state"
)

// Step is one command's result: its lines, and a snapshot of every resource's counts after it
// (for the SVG).
type Step struct {
	Command string
	Lines   []string
	Counts  map[string][2]int64 // resource → capacity, allocatable (-1: not reported)
	At      time.Duration       // fake-clock time since the scenario started
}

// Do runs one command and returns what happened. Commands:
//
//	kubelet start                      start the manager (first command of every script)
//	plugin start|stop|restart NAME [devices=N]
//	plugin rolling-update NAME         a second instance registers, then the first exits
//	plugin add-instance NAME           a second instance registers on a new socket; the first keeps running
//	plugin stop-instance NAME SOCKET   the instance serving SOCKET exits; the others keep running
//	plugin register-again NAME         the newest instance sends a second Register for its own socket
//	device unhealthy|healthy NAME ID
//	pod admit NAME gpu=2 | init=gpu:1 sidecar=nic:1 app=gpu:2 ... [crash=allocate]
//	                                   crash=allocate: the manager crashes during the pod's Allocate (CrashAtAllocate)
//	pod delete NAME | pod complete NAME
//	kubelet restart                    kdm restarts; running containers keep running, plugins re-register after the re-admissions
//	node reboot                        everything stops; nothing runs; plugins come back only with "plugin start"
//	checkpoint corrupt | checkpoint legacy-v1 FILE | checkpoint
//	advance DURATION                   move the fake clock, then run the node-status sync
//	capacity | allocations
func (r *Runner) Do(cmd string, args []string) (Step, error) {
	st := Step{Command: strings.TrimSpace(cmd + " " + strings.Join(args, " "))}
	lines, err := r.do(cmd, args)
	r.inflightSettle()
	lines = append(lines, r.drain()...)
	if err == nil {
		if v := r.checkExclusive(); v != "" {
			err = errors.New(v)
		}
	}
	st.Lines, st.At = lines, r.clock.Since(r.start)
	if r.m != nil {
		st.Counts = r.allCounts()
	}
	return st, err
}

// inflightSettle waits, within settle, until every admission in flight has finished or is
// asleep waiting for a plugin with nothing to wake it (Manager.AdmissionsAsleep): one that a
// device change or the clock woke belongs to this command's outcome.
func (r *Runner) inflightSettle() {
	if r.m == nil {
		return
	}
	timer := time.NewTimer(settle)
	defer timer.Stop()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		// The broadcasts are taken before the check, so no change is missed; the ticker
		// covers a sleeper that woke and went back to sleep, which broadcasts nothing.
		r.mu.Lock()
		settled := r.settled
		inflight := 0
		for _, p := range r.pods {
			if p.state == "admitting" || p.state == "waiting" {
				inflight++
			}
		}
		r.mu.Unlock()
		changed := r.m.DeviceChanges()
		if inflight == 0 || r.m.AdmissionsAsleep() == inflight {
			return
		}
		select {
		case <-settled:
		case <-changed:
		case <-tick.C:
		case <-timer.C:
			return
		}
	}
}

func (r *Runner) do(cmd string, args []string) ([]string, error) {
	arg := func(i int) string {
		if i < len(args) {
			return args[i]
		}
		return ""
	}
	switch cmd {
	case "kubelet":
		switch arg(0) {
		case "start":
			r.ready = true
			if err := r.startManager(nil); err != nil {
				return nil, err
			}
			return []string{"device manager started"}, nil
		case "restart":
			return r.restart(false)
		}
	case "node":
		if arg(0) == "reboot" {
			return r.restart(true)
		}
	case "plugin":
		return r.pluginCmd(arg(0), arg(1), args[min(2, len(args)):])
	case "device":
		p, ok := r.plugins[arg(1)]
		if !ok || p.newest() == nil {
			return nil, fmt.Errorf("plugin %q is not running", arg(1))
		}
		health := pluginapi.Unhealthy
		if arg(0) == "healthy" {
			health = pluginapi.Healthy
		}
		for i, d := range p.devices {
			if d.ID == arg(2) {
				p.devices[i] = &pluginapi.Device{ID: d.ID, Health: health}
			}
		}
		for _, in := range p.running { // every instance serves the same devices
			if err := in.inst.SetHealth(arg(2), health); err != nil {
				return nil, err
			}
		}
		res := r.resource(arg(1))
		if served, _ := r.endpointOf(res); served == "" {
			// Instances run but the manager serves none of them (a kubelet 1.36 after the
			// served instance exited): nobody reads the change, so there is nothing to wait for.
			return []string{fmt.Sprintf("%s %s is %s; no instance serves %s, so the manager does not see it", res, arg(2), health, res)}, nil
		}
		want := int64(0)
		for _, d := range p.devices {
			if d.Health == pluginapi.Healthy {
				want++
			}
		}
		if err := r.waitCapacity(res, func(_, a int64) bool { return a == want }); err != nil {
			return nil, err
		}
		return []string{fmt.Sprintf("%s %s is %s", res, arg(2), health)}, nil
	case "pod":
		return r.podCmd(arg(0), arg(1), args[min(2, len(args)):])
	case "advance":
		d, err := time.ParseDuration(arg(0))
		if err != nil {
			return nil, err
		}
		// Each waiting admission's wake on the way comes at its own time, as it would on a
		// real clock: the clock stops there until the admissions have settled.
		target := r.clock.Now().Add(d)
		var removed []string
		for {
			r.inflightSettle()
			next, ok := r.m.NextWake()
			if !ok || next.After(target) || !next.After(r.clock.Now()) {
				break
			}
			r.clock.SetTime(next)
			_, _, rm := r.m.GetCapacity()
			removed = append(removed, rm...)
		}
		r.clock.SetTime(target)
		_, _, rm := r.m.GetCapacity()
		removed = append(removed, rm...)
		out := []string{fmt.Sprintf("clock +%v (t=%v)", d, r.clock.Since(r.start))}
		for _, res := range removed {
			if r.m.Policy().DropRemovedResources {
				out = append(out, res+" removed: its plugin has been gone longer than the grace period; the node drops it from its capacity")
			} else {
				out = append(out, res+" removed: its plugin has been gone longer than the grace period; the node publishes capacity 0 for it from now on")
			}
		}
		return out, nil
	case "capacity":
		return r.capacityLines(), nil
	case "allocations":
		return r.allocationLines(), nil
	case "checkpoint":
		return r.checkpointCmd(arg(0), arg(1))
	}
	return nil, fmt.Errorf("unknown command %q", strings.TrimSpace(cmd+" "+strings.Join(args, " ")))
}

func (r *Runner) pluginCmd(verb, name string, opts []string) ([]string, error) {
	p := r.plugins[name]
	switch verb {
	case "start":
		if p == nil {
			n := 4
			for _, o := range opts {
				if v, ok := strings.CutPrefix(o, "devices="); ok {
					var err error
					if n, err = strconv.Atoi(v); err != nil {
						return nil, fmt.Errorf("bad devices=%s", v)
					}
				}
			}
			p = &plugin{name: name}
			for i := 0; i < n; i++ {
				p.devices = append(p.devices, &pluginapi.Device{ID: fmt.Sprintf("%s-%d", name, i), Health: pluginapi.Healthy})
			}
			r.plugins[name] = p
		}
		if p.newest() != nil {
			// A plugin that runs already is restarted (its processes exit, then one starts),
			// as the simulator (package explore) takes it: `plugin add-instance` adds one.
			return r.pluginCmd("restart", name, nil)
		}
		if err := r.startPlugin(p); err != nil {
			return nil, err
		}
		return []string{fmt.Sprintf("%s registered with %d devices", r.resource(name), len(p.devices))}, nil
	case "stop":
		if p == nil || p.newest() == nil {
			return nil, fmt.Errorf("plugin %q is not running", name)
		}
		if err := r.stopInOrder(p, r.resource(name)); err != nil {
			return nil, err
		}
		if err := r.waitCapacity(r.resource(name), func(_, a int64) bool { return a <= 0 }); err != nil {
			return nil, err
		}
		return []string{r.resource(name) + " plugin exited; its devices are unhealthy, capacity kept for the grace period"}, nil
	case "restart":
		out, err := r.pluginCmd("stop", name, nil)
		if err != nil {
			return nil, err
		}
		more, err := r.pluginCmd("start", name, nil)
		return append(out, more...), err
	case "rolling-update":
		if p == nil || p.newest() == nil {
			return nil, fmt.Errorf("plugin %q is not running", name)
		}
		old := *p.newest()
		if err := r.startPlugin(p); err != nil {
			return nil, err
		}
		c1, a1 := r.counts(r.resource(name))
		r.forget(p, old.socket)
		old.inst.DropStreams()
		old.inst.Stop()
		if err := r.waitReplacedStreamsClosed(r.resource(name), len(p.running)-1); err != nil {
			return nil, err
		}
		c2, a2 := r.counts(r.resource(name))
		return []string{
			fmt.Sprintf("new instance %s registered while the old one runs: capacity %d, allocatable %d", p.newest().socket, c1, a1),
			fmt.Sprintf("old instance exited: capacity %d, allocatable %d", c2, a2),
		}, nil
	case "add-instance":
		if p == nil || p.newest() == nil {
			return nil, fmt.Errorf("plugin %q is not running", name)
		}
		prev := p.newest().socket
		if err := r.startPlugin(p); err != nil {
			return nil, err
		}
		socket := p.newest().socket
		res := r.resource(name)
		if err := r.waitEndpoint(res, socket+" serving", func(s string, _ int) bool { return s == socket }); err != nil {
			return nil, err
		}
		c, a := r.counts(res)
		return []string{fmt.Sprintf("instance %s registered while %s runs: capacity %d, allocatable %d", socket, prev, c, a)}, nil
	case "stop-instance":
		return r.stopInstance(p, name, arg0(opts))
	case "register-again":
		return r.registerAgain(p, name)
	}
	return nil, fmt.Errorf("unknown plugin command %q", verb)
}

func (r *Runner) podCmd(verb, name string, args []string) ([]string, error) {
	switch verb {
	case "admit":
		args, crash := splitCrash(args)
		obj, err := r.parsePod(name, args)
		if err != nil {
			return nil, err
		}
		r.mu.Lock()
		r.pods[name] = &pod{obj: obj}
		r.order = append(r.order, name)
		r.mu.Unlock()
		if crash {
			return r.admitAndCrash(name)
		}
		r.admit(name)
		return nil, nil
	case "delete", "complete":
		p, ok := r.pods[name]
		if !ok {
			return nil, fmt.Errorf("no pod %q", name)
		}
		r.mu.Lock()
		if verb == "complete" && (!p.running || p.state != "admitted") {
			r.mu.Unlock()
			return []string{name + " is not running; nothing completes"}, nil
		}
		end := state.PodDeleted
		if verb == "complete" {
			end = state.PodCompleted
		}
		fate := state.Fate(end)
		p.running, p.completed = false, p.completed || end == state.PodCompleted
		if !fate.Active {
			p.state = "deleted"
			if p.cancel != nil {
				p.cancel() // its admission, if one is in flight, ends with the pod
			}
		}
		r.mu.Unlock()
		r.m.UpdateAllocatedDevices()
		if verb == "delete" {
			return []string{name + " deleted; its devices are released"}, nil
		}
		return []string{name + " completed; its containers no longer run (the pod object remains)"}, nil
	}
	return nil, fmt.Errorf("unknown pod command %q", verb)
}

// restart stops the manager and starts a new one on the same directory. On a kubelet restart
// the containers keep running and the plugins, still alive, register again once the existing
// pods have been re-admitted; on a node reboot nothing runs and the plugins stay down.
func (r *Runner) restart(reboot bool) ([]string, error) {
	r.endAdmissions()
	if err := r.m.Stop(); err != nil {
		return nil, err
	}
	var out []string
	stopped := map[string]bool{}
	for _, name := range sortedNames(r.plugins) {
		if p := r.plugins[name]; p.newest() != nil {
			p.stopAll()
			stopped[name] = true
		}
	}
	var running []devicemanager.ContainerKey
	r.mu.Lock()
	r.ready = false
	for _, p := range r.pods {
		if reboot {
			p.running = false
		}
		if !p.running || p.state == "deleted" || p.state == "rejected" {
			continue
		}
		for _, c := range p.obj.Spec.InitContainers {
			if c.RestartPolicy != nil {
				running = append(running, devicemanager.ContainerKey{PodUID: string(p.obj.UID), ContainerName: c.Name})
			}
		}
		for _, c := range p.obj.Spec.Containers {
			running = append(running, devicemanager.ContainerKey{PodUID: string(p.obj.UID), ContainerName: c.Name})
		}
	}
	r.mu.Unlock()
	if err := r.startManager(running); err != nil {
		return nil, err
	}
	if reboot {
		out = append(out, "node rebooted: the device manager started from the checkpoint; no container is running; plugins are down")
	} else {
		out = append(out, "device manager restarted from the checkpoint; containers keep running")
	}
	out = append(out, r.capacityLines()...)
	for _, name := range r.order {
		p := r.pods[name]
		if p.state == "deleted" || p.state == "rejected" || (p.completed && !state.Fate(state.PodCompleted).Readmit) {
			continue
		}
		out = append(out, "re-admitting "+name)
		r.admit(name)
		out = append(out, r.drain()...)
	}
	r.mu.Lock()
	r.ready = true
	r.mu.Unlock()
	r.m.UpdateAllocatedDevices()
	if !reboot {
		for _, name := range sortedNames(stopped) {
			if err := r.startPlugin(r.plugins[name]); err != nil {
				return nil, err
			}
			out = append(out, r.resource(name)+" plugin saw kubelet.sock re-created and registered again")
		}
	}
	return out, nil
}

func (r *Runner) checkpointCmd(verb, file string) ([]string, error) {
	path := filepath.Join(r.dir, checkpoint.FileName)
	switch verb {
	case "corrupt":
		b, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) {
			return []string{"no kubelet_internal_checkpoint to truncate"}, nil
		}
		if err != nil {
			return nil, err
		}
		return []string{"truncated kubelet_internal_checkpoint to half its size (a torn write)"}, os.WriteFile(path, b[:len(b)/2], 0o600)
	case "legacy-v1":
		if !filepath.IsAbs(file) {
			file = filepath.Join(r.scriptDir, file)
		}
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		return []string{"replaced the checkpoint with a pre-1.20 (V1) file: " + filepath.Base(filepath.Dir(file))}, os.WriteFile(path, b, 0o600)
	case "":
		entries, _ := os.ReadDir(r.dir)
		var quarantined []string
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), checkpoint.FileName+".corrupt-") {
				quarantined = append(quarantined, "kubelet_internal_checkpoint.corrupt-<time>")
			}
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return append([]string{"checkpoint: none"}, quarantined...), nil
		}
		d, layout, err := checkpoint.Decode(b)
		if err != nil {
			return []string{"checkpoint: unreadable: " + err.Error()}, nil
		}
		out := []string{fmt.Sprintf("checkpoint: %s layout, %d entries, registered %s", layout, len(d.PodDeviceEntries), strings.Join(sortedNames(d.RegisteredDevices), ","))}
		for _, q := range quarantined {
			out = append(out, "quarantined: "+q)
		}
		return out, nil
	}
	return nil, fmt.Errorf("unknown checkpoint command %q", verb)
}
