package conformance

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/endpoint"
)

func (r *runner) checkStreamClose() (Status, []string) {
	ev, err := r.ensureRegistered()
	if err != nil {
		return Skip, []string{err.Error()}
	}
	cur, ok := r.current()
	if !ok {
		return Skip, []string{"no live registration"}
	}
	from := len(r.reg.snapshot())
	closed := time.Now()
	r.reg.closeStream(cur.index)
	select {
	case <-r.proc.exited():
		return Fail, append([]string{fmt.Sprintf("the plugin exited %s after the manager closed its stream (%s)",
			sinceStr(closed, time.Now()), r.proc.exitStatus())}, ev...)
	case <-time.After(r.t.StreamCloseWindow):
	case <-r.ctx.Done():
		return Skip, []string{"run cancelled"}
	}
	if v, ok := r.waitAccepted(from, 0); ok {
		return Pass, append([]string{fmt.Sprintf("the plugin re-registered %s after its stream was closed", sinceStr(closed, v.at))}, ev...)
	}
	// Still running and not re-registered: does its socket still serve a new connection?
	ctx, cancel := context.WithTimeout(r.ctx, r.t.FirstList)
	defer cancel()
	ep, err := endpoint.Dial(ctx, cur.req.ResourceName, cur.socket, endpoint.Config{DialTimeout: r.t.FirstList, OptionsTimeout: r.t.FirstList, Logger: r.cfg.Logger})
	if err != nil {
		return Fail, append([]string{fmt.Sprintf("the plugin is running but neither re-registered nor serves %s: %v", cur.socket, err)}, ev...)
	}
	defer ep.Stop()
	got := make(chan int, 1)
	runDone := make(chan struct{})
	go func() {
		defer close(runDone)
		_ = ep.Run(ctx, func(d []*pluginapi.Device) {
			select {
			case got <- len(d):
			default:
			}
			cancel()
		})
	}()
	defer func() { cancel(); <-runDone }() // the stream ends with ctx: wait for it
	select {
	case n := <-got:
		return Pass, append([]string{fmt.Sprintf("the plugin kept serving %s: a new connection listed %d devices", cur.socket, n)}, ev...)
	case <-ctx.Done():
		return Fail, append([]string{fmt.Sprintf("the plugin is running but sends no list on a new connection to %s", cur.socket)}, ev...)
	}
}

// streamCloseCheck is check 6, run by checkStreamClose above.
var streamCloseCheck = check{6, "stream-close",
	"when the manager closes the ListAndWatch stream, the plugin keeps serving or re-registers, and does not exit",
	"the kubelet's client Disconnect closes the plugin connection when a stream ends or at Stop, and a replaced registration's stream is closed when it ends; a plugin must survive its stream being closed",
	(*runner).checkStreamClose}

func (r *runner) checkManagerRestart() (Status, []string) {
	ev, err := r.ensureRegistered()
	if err != nil {
		return Skip, []string{err.Error()}
	}
	cur, _ := r.lastAccepted()
	before := deviceIDs(r.latestList(cur))
	r.reg.stop()
	from := len(r.reg.snapshot())
	if err := r.reg.start(); err != nil {
		return Fail, append([]string{"restarting the manager probe: " + err.Error()}, ev...)
	}
	restarted := time.Now()
	v, ok := r.waitAccepted(from, r.t.RegisterWarn)
	if !ok {
		msg := fmt.Sprintf("no registration within %v of the manager restart", r.t.RegisterWarn)
		if !r.proc.alive() {
			msg += "; the plugin exited: " + r.proc.exitStatus()
		}
		return Fail, append([]string{msg}, ev...)
	}
	took := v.at.Sub(restarted)
	st := Pass
	first := fmt.Sprintf("re-registered %s after kubelet.sock was re-created", sinceStr(restarted, v.at))
	if took > r.t.Register {
		st = Warn
		first += fmt.Sprintf(" (more than %v)", r.t.Register)
	}
	ev = append([]string{first}, ev...)
	lv, ok := r.waitLists(v.index, 1, r.t.FirstList)
	if !ok {
		return Fail, append(ev, fmt.Sprintf("no ListAndWatch list within %v of re-registration", r.t.FirstList))
	}
	after := deviceIDs(lv.lists[0].devices)
	if !before.Equal(after) {
		return Fail, append(ev, fmt.Sprintf("device IDs changed: missing %v, new %v",
			sets.List(before.Difference(after)), sets.List(after.Difference(before))))
	}
	return st, append(ev, fmt.Sprintf("same %d device IDs", after.Len()))
}

// managerRestartCheck is check 4, run by checkManagerRestart above.
var managerRestartCheck = check{4, "manager-restart",
	"after a manager restart (its socket removed and created again) the plugin re-registers within 5s (WARN up to 15s) with the same device IDs",
	"the kubelet's device manager Start removes every socket in the directory (CleanupPluginDirectory) and creates kubelet.sock afresh; plugins must detect this and call Register again",
	(*runner).checkManagerRestart}

// latestList returns the last list of v, or of the first registration if v has none.
func (r *runner) latestList(v regView) []*pluginapi.Device {
	if l := v.latest(); l != nil {
		return l
	}
	if r.first >= 0 {
		return r.reg.snapshot()[r.first].latest()
	}
	return nil
}

func deviceIDs(devs []*pluginapi.Device) sets.Set[string] {
	s := sets.New[string]()
	for _, d := range devs {
		s.Insert(d.ID)
	}
	return s
}

func (r *runner) checkIdleCPU() (Status, []string) {
	if !r.proc.alive() {
		return Skip, []string{"the plugin is not running: " + r.proc.exitStatus()}
	}
	c0, err := r.proc.cpuTime()
	if err != nil {
		return Skip, []string{err.Error()}
	}
	t0 := time.Now()
	if !r.sleep(r.t.CPUWindow) {
		return Skip, []string{"run cancelled"}
	}
	c1, err := r.proc.cpuTime()
	if err != nil {
		return Skip, []string{err.Error()}
	}
	if !r.proc.alive() {
		return Skip, []string{"the plugin exited during the window: " + r.proc.exitStatus()}
	}
	wall := time.Since(t0)
	use := (c1 - c0).Seconds() / wall.Seconds()
	msg := fmt.Sprintf("%.1f%% of one core over %s after the manager restart (limit %.0f%%)", use*100, fmtDuration(wall), r.t.CPULimit*100)
	if use >= r.t.CPULimit {
		return Fail, []string{msg, "a watcher that busy-loops once kubelet.sock is re-created looks like this"}
	}
	return Pass, []string{msg}
}

// idleCPUCheck is check 8, run by checkIdleCPU above.
var idleCPUCheck = check{8, "idle-cpu",
	"idle CPU after a manager restart stays below 5% of one core over 10s",
	"the kubelet only re-creates kubelet.sock on restart; a plugin whose watcher breaks then must not busy-loop",
	(*runner).checkIdleCPU}

func (r *runner) checkManagerAbsent() (Status, []string) {
	r.reg.stop()
	r.proc.kill(5 * time.Second)
	if err := r.proc.start(); err != nil {
		return Fail, []string{err.Error()}
	}
	started := time.Now()
	var early string
	select {
	case <-r.proc.exited():
		early = fmt.Sprintf("the plugin exited %s after start while the manager was absent (%s)", sinceStr(started, time.Now()), r.proc.exitStatus())
	case <-time.After(r.t.ManagerDelay):
	case <-r.ctx.Done():
		return Skip, []string{"run cancelled"}
	}
	from := len(r.reg.snapshot())
	if err := r.reg.start(); err != nil {
		return Fail, []string{"starting the manager probe: " + err.Error()}
	}
	appeared := time.Now()
	if early == "" {
		if v, ok := r.waitAccepted(from, r.t.Register); ok {
			return Pass, []string{fmt.Sprintf("registered %s after kubelet.sock appeared (%s after start), without exiting",
				sinceStr(appeared, v.at), sinceStr(started, v.at))}
		}
		if r.proc.alive() {
			return Fail, []string{fmt.Sprintf("no registration within %v of kubelet.sock appearing", r.t.Register)}
		}
		early = "the plugin exited after kubelet.sock appeared (" + r.proc.exitStatus() + ")"
	}
	// What a restart loop (a DaemonSet's restartPolicy) would do.
	restarted := time.Now()
	if err := r.proc.start(); err != nil {
		return Fail, []string{early, err.Error()}
	}
	if v, ok := r.waitAccepted(from, r.t.Register); ok {
		return Warn, []string{early, fmt.Sprintf("registered %s after being restarted: only a restart loop saves it", sinceStr(restarted, v.at))}
	}
	return Fail, []string{early, fmt.Sprintf("no registration within %v even after a restart", r.t.Register)}
}

// managerAbsentCheck is check 5, run by checkManagerAbsent above.
var managerAbsentCheck = check{5, "manager-absent-at-start",
	"with the manager absent at start and appearing 3s later, the plugin registers within 5s of it without exiting (WARN if only a restart saves it)",
	"the kubelet's kubelet.sock may appear after the plugin starts (node boot, kubelet restart); the plugin must wait for it rather than exit",
	(*runner).checkManagerAbsent}

func (r *runner) checkSigterm() (Status, []string) {
	ev, err := r.ensureRegistered()
	if err != nil {
		return Skip, []string{err.Error()}
	}
	cur, _ := r.lastAccepted()
	sent := time.Now()
	if err := r.proc.signal(syscall.SIGTERM); err != nil {
		return Fail, append(ev, "sending SIGTERM: "+err.Error())
	}
	select {
	case <-r.proc.exited():
	case <-time.After(r.t.Term):
		r.proc.kill(5 * time.Second)
		return Fail, append([]string{fmt.Sprintf("still running %v after SIGTERM; killed", r.t.Term)}, ev...)
	case <-r.ctx.Done():
		return Skip, []string{"run cancelled"}
	}
	exited := fmt.Sprintf("exited %s after SIGTERM (%s)", sinceStr(sent, time.Now()), r.proc.exitStatus())
	if _, err := os.Lstat(cur.socket); err == nil {
		return Warn, append([]string{exited, "but left its socket " + cur.socket + " behind"}, ev...)
	}
	return Pass, append([]string{exited + " and removed its socket"}, ev...)
}

// sigtermCheck is check 9, run by checkSigterm above.
var sigtermCheck = check{9, "sigterm",
	"on SIGTERM the plugin removes its socket and exits within 5s",
	"the kubelet's CleanupPluginDirectory removes stale sockets only at its own start; a socket left behind is dialled in vain by anyone reading the directory",
	(*runner).checkSigterm}
