package conformance

import (
	"context"
	"fmt"
	"os"
	"strings"
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
	var curs []regView
	for _, res := range r.resources {
		if cur, ok := r.current(res); ok {
			curs = append(curs, cur)
		}
	}
	if len(curs) == 0 {
		return Skip, []string{"no live registration"}
	}
	from := len(r.reg.snapshot())
	closed := time.Now()
	for _, cur := range curs {
		r.reg.closeStream(cur.index)
	}
	select {
	case <-r.proc.exited():
		return Fail, append([]string{fmt.Sprintf("the plugin exited %s after the manager closed its stream (%s)",
			sinceStr(closed, time.Now()), r.proc.exitStatus())}, ev...)
	case <-time.After(r.t.StreamCloseWindow):
	case <-r.ctx.Done():
		return Skip, []string{"run cancelled"}
	}
	st := Pass
	var first []string
	for _, cur := range curs {
		s, msg := r.afterStreamClose(cur, from, closed)
		st = worse(st, s)
		first = append(first, r.label(cur.req.ResourceName)+msg)
	}
	return st, append(first, ev...)
}

// afterStreamClose judges one resource whose stream the manager closed at closed: it passes
// when the plugin re-registered it (at index >= from) or still serves a new connection on
// its socket.
func (r *runner) afterStreamClose(cur regView, from int, closed time.Time) (Status, string) {
	if v, ok := r.waitAccepted(from, cur.req.ResourceName, 0); ok {
		return Pass, fmt.Sprintf("the plugin re-registered %s after its stream was closed", sinceStr(closed, v.at))
	}
	// Still running and not re-registered: does its socket still serve a new connection?
	ctx, cancel := context.WithTimeout(r.ctx, r.t.FirstList)
	defer cancel()
	ep, err := endpoint.Dial(ctx, cur.req.ResourceName, cur.socket, endpoint.Config{DialTimeout: r.t.FirstList, OptionsTimeout: r.t.FirstList, Logger: r.cfg.Logger})
	if err != nil {
		return Fail, fmt.Sprintf("the plugin is running but neither re-registered nor serves %s: %v", cur.socket, err)
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
		return Pass, fmt.Sprintf("the plugin kept serving %s: a new connection listed %d devices", cur.socket, n)
	case <-ctx.Done():
		return Fail, fmt.Sprintf("the plugin is running but sends no list on a new connection to %s", cur.socket)
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
	before := map[string]sets.Set[string]{}
	for _, res := range r.resources {
		cur, _ := r.lastAccepted(res)
		before[res] = deviceIDs(r.latestList(cur))
	}
	r.restartedAt = time.Now()
	r.reg.stop()
	from := len(r.reg.snapshot())
	if err := r.reg.start(); err != nil {
		return Fail, append([]string{"restarting the manager probe: " + err.Error()}, ev...)
	}
	restarted := time.Now()
	got, missing := r.waitAllAccepted(from, r.t.RegisterWarn)
	st := Pass
	var out []string
	for _, res := range r.resources {
		lbl := r.label(res)
		v, ok := got[res]
		if !ok {
			msg := lbl + fmt.Sprintf("no registration within %v of the manager restart", r.t.RegisterWarn)
			if !r.proc.alive() {
				msg += "; the plugin exited: " + r.proc.exitStatus()
			}
			st, out = Fail, append(out, msg)
			continue
		}
		msg := lbl + fmt.Sprintf("re-registered %s after kubelet.sock was re-created", sinceStr(restarted, v.at))
		if v.at.Sub(restarted) > r.t.Register {
			st = worse(st, Warn)
			msg += fmt.Sprintf(" (more than %v)", r.t.Register)
		}
		out = append(out, msg)
		lv, ok := r.waitLists(v.index, 1, r.t.FirstList)
		if !ok {
			msg := fmt.Sprintf("no ListAndWatch list within %v of re-registration", r.t.FirstList)
			if !lv.streamEnd.IsZero() {
				msg = fmt.Sprintf("the ListAndWatch stream ended %s after re-registration without a list", sinceStr(v.at, lv.streamEnd))
			}
			st, out = Fail, append(out, lbl+msg)
			continue
		}
		after := deviceIDs(lv.lists[0].devices)
		if b := before[res]; !b.Equal(after) {
			st, out = Fail, append(out, lbl+fmt.Sprintf("device IDs changed: missing %v, new %v",
				sets.List(b.Difference(after)), sets.List(after.Difference(b))))
			continue
		}
		out = append(out, lbl+fmt.Sprintf("same %d device IDs", after.Len()))
	}
	if len(missing) == len(r.resources) {
		out = out[:0:0]
		msg := fmt.Sprintf("no registration within %v of the manager restart", r.t.RegisterWarn)
		if !r.proc.alive() {
			msg += "; the plugin exited: " + r.proc.exitStatus()
		}
		out = append(out, msg)
	}
	return st, append(out, ev...)
}

// managerRestartCheck is check 4, run by checkManagerRestart above.
var managerRestartCheck = check{4, "manager-restart",
	"after a manager restart (its socket removed and created again) the plugin re-registers within 5s (WARN up to 15s) with the same device IDs",
	"the kubelet's device manager Start removes every socket in the directory (CleanupPluginDirectory) and creates kubelet.sock afresh; plugins must detect this and call Register again",
	(*runner).checkManagerRestart}

// latestList returns the last list of v, or of its resource's first registration if v has
// none.
func (r *runner) latestList(v regView) []*pluginapi.Device {
	if l := v.latest(); l != nil {
		return l
	}
	if i, ok := r.first[v.req.GetResourceName()]; ok {
		return r.reg.snapshot()[i].latest()
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
	since, what := r.restartedAt, "after the manager restart"
	if since.IsZero() {
		since, what = time.Now(), "into the check"
	}
	if !r.proc.alive() {
		r.wd.poll()
		if deaths := r.wd.since(since); len(deaths) > 0 {
			return Fail, deathsEvidence(deaths, since, what)
		}
		return Skip, []string{"the plugin is not running: " + r.proc.exitStatus()}
	}
	// Measured even when a plugin process has died already: a restart loop keeps the group.
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
	wall := time.Since(t0)
	r.wd.poll()
	var msg string
	if c1 < c0 {
		msg = fmt.Sprintf("CPU use over %s cannot be measured: a process of the plugin's group ended without being reaped inside it, and its CPU time went with it", fmtDuration(wall))
	} else {
		msg = fmt.Sprintf("%.1f%% of one core over %s %s (limit %.0f%%)", (c1-c0).Seconds()/wall.Seconds()*100, fmtDuration(wall), what, r.t.CPULimit*100)
	}
	if deaths := r.wd.since(since); len(deaths) > 0 {
		return Fail, append(deathsEvidence(deaths, since, what), msg)
	}
	if c1 < c0 {
		return Skip, []string{msg}
	}
	if use := (c1 - c0).Seconds() / wall.Seconds(); use >= r.t.CPULimit {
		return Fail, []string{msg, "a watcher that busy-loops once kubelet.sock is re-created looks like this"}
	}
	return Pass, []string{msg, "no plugin process died " + what}
}

// deathsEvidence is check 8's evidence for plugin processes that died since the manager
// restart.
func deathsEvidence(deaths []death, since time.Time, what string) []string {
	var ev []string
	for _, d := range deaths {
		ev = append(ev, d.evidence(since, what)...)
	}
	return ev
}

// idleCPUCheck is check 8, run by checkIdleCPU above.
var idleCPUCheck = check{8, "idle-cpu",
	"after a manager restart no plugin process dies, and idle CPU stays below 5% of one core over 10s, exited processes included",
	"the kubelet only re-creates kubelet.sock on restart; a plugin that crashes then leaves its resource without devices until something restarts it, and one whose watcher breaks must not busy-loop",
	(*runner).checkIdleCPU}

func (r *runner) checkManagerAbsent() (Status, []string) {
	if len(r.resources) == 0 {
		return Skip, []string{errNoRegistration.Error()}
	}
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
		got, missing := r.waitAllAccepted(from, r.t.Register)
		if len(missing) == 0 {
			var ev []string
			for _, res := range r.resources {
				v := got[res]
				ev = append(ev, r.label(res)+fmt.Sprintf("registered %s after kubelet.sock appeared (%s after start), without exiting",
					sinceStr(appeared, v.at), sinceStr(started, v.at)))
			}
			return Pass, ev
		}
		if r.proc.alive() {
			return Fail, []string{fmt.Sprintf("no registration of %s within %v of kubelet.sock appearing", quoteList(missing), r.t.Register)}
		}
		early = "the plugin exited after kubelet.sock appeared (" + r.proc.exitStatus() + ")"
	}
	// What a restart loop (a DaemonSet's restartPolicy) would do. A plugin that exits is a
	// FAIL whether or not the restart saves it (docs/conformance.md, "Verdicts").
	restarted := time.Now()
	if err := r.proc.start(); err != nil {
		return Fail, []string{early, err.Error()}
	}
	if got, missing := r.waitAllAccepted(from, r.t.Register); len(missing) == 0 {
		last := restarted
		for _, v := range got {
			if v.at.After(last) {
				last = v.at
			}
		}
		return Fail, []string{early, fmt.Sprintf("registered %s after being restarted: only a restart loop saves it", sinceStr(restarted, last))}
	}
	return Fail, []string{early, fmt.Sprintf("no registration within %v even after a restart", r.t.Register)}
}

// managerAbsentCheck is check 5, run by checkManagerAbsent above.
var managerAbsentCheck = check{5, "manager-absent-at-start",
	"with the manager absent at start and appearing 3s later, the plugin registers every resource within 5s of it without exiting",
	"the kubelet's kubelet.sock may appear after the plugin starts (node boot, kubelet restart); the plugin must wait for it rather than exit",
	(*runner).checkManagerAbsent}

func (r *runner) checkSigterm() (Status, []string) {
	ev, err := r.ensureRegistered()
	if err != nil {
		return Skip, []string{err.Error()}
	}
	var sockets []string
	for _, res := range r.resources {
		if cur, ok := r.lastAccepted(res); ok {
			sockets = append(sockets, cur.socket)
		}
	}
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
	var left []string
	for _, sock := range sockets {
		if _, err := os.Lstat(sock); err == nil {
			left = append(left, sock)
		}
	}
	if len(left) > 0 {
		return Warn, append([]string{exited, "but left its socket " + strings.Join(left, ", ") + " behind"}, ev...)
	}
	what := "its socket"
	if len(sockets) > 1 {
		what = "its sockets"
	}
	return Pass, append([]string{exited + " and removed " + what}, ev...)
}

// sigtermCheck is check 9, run by checkSigterm above.
var sigtermCheck = check{9, "sigterm",
	"on SIGTERM the plugin removes its socket and exits within 5s",
	"the kubelet's CleanupPluginDirectory removes stale sockets only at its own start; a socket left behind is dialled in vain by anyone reading the directory",
	(*runner).checkSigterm}
