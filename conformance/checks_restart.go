package conformance

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

func (r *runner) checkManagerRestart() (Status, []string) {
	first, bad := r.fresh()
	if bad != nil {
		return bad.status, bad.evidence
	}
	ev := []string{first}
	before := map[string]sets.Set[string]{}
	for _, res := range r.resources {
		cur, _ := r.lastAccepted(res)
		v, ok := r.waitLists(cur.index, 1, r.t.FirstList)
		if !ok {
			return Fail, append([]string{r.label(res) + fmt.Sprintf("the fresh plugin process sent no list within %v of registering, so there is nothing to compare after the restart", r.t.FirstList)}, ev...)
		}
		before[res] = deviceIDs(v.latest())
	}
	r.restartedAt, r.restartedPID = time.Now(), r.proc.pid()
	r.reg.stop()
	from := len(r.reg.snapshot())
	if err := r.reg.start(); err != nil {
		return Error, append([]string{"suite step \"restart the manager probe\" failed: " + err.Error()}, ev...)
	}
	restarted := time.Now()
	got, missing := r.waitAllAccepted(from, r.t.RegisterWarn)
	st, lastList := Pass, restarted
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
				if lv.streamEnd.After(lastList) {
					lastList = lv.streamEnd
				}
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
		if lv.lists[0].at.After(lastList) {
			lastList = lv.lists[0].at
		}
	}
	// A plugin that crashes right after re-registering (its scanner sending to the closed
	// stream's channel) fails here, with its death's evidence, not in whichever check runs
	// next: the check watches it for Settle after the last list or stream end, failed or not.
	if msg, ok := r.keepsRunning(lastList, restarted, "the manager restart"); !ok {
		st, out = Fail, append(out, msg)
	} else if st != Fail {
		out = append(out, fmt.Sprintf("kept running %v after its last list", r.t.Settle))
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
	"from a fresh plugin process: after a manager restart (its socket removed and created again) the plugin re-registers within 5s (WARN up to 15s) with the same device IDs, and keeps running 1s after its list",
	"the kubelet's device manager Start removes every socket in the directory (CleanupPluginDirectory) and creates kubelet.sock afresh; plugins must detect this and call Register again",
	(*runner).checkManagerRestart}

func deviceIDs(devs []*pluginapi.Device) sets.Set[string] {
	s := sets.New[string]()
	for _, d := range devs {
		s.Insert(d.ID)
	}
	return s
}

func (r *runner) checkIdleCPU() (Status, []string) {
	if r.restartedPID == 0 {
		return Skip, []string{"depends on check 4, which did not restart the manager"}
	}
	since, what := r.restartedAt, "after the manager restart"
	dep := fmt.Sprintf("depends on check 4: measures its plugin process (pid %d) from %s after the manager restart",
		r.restartedPID, sinceStr(since, time.Now()))
	if !r.proc.alive() || r.proc.pid() != r.restartedPID {
		r.wd.poll()
		if deaths := r.wd.since(since); len(deaths) > 0 {
			return Fail, append(deathsEvidence(deaths, since, what), dep)
		}
		return Skip, []string{dep, "the plugin is not running: " + r.proc.exitStatus()}
	}
	r.wd.poll()
	s0, err := sampleSched(r.wd.liveTree(r.restartedPID))
	if err != nil {
		return Error, []string{"suite step \"read the plugin's CPU time\" failed: " + err.Error(), dep}
	}
	t0 := time.Now()
	if !r.sleep(r.t.CPUWindow) {
		return Skip, []string{"run cancelled"}
	}
	r.wd.poll()
	s1, err := sampleSched(r.wd.liveTree(r.restartedPID))
	if err != nil {
		return Error, []string{"suite step \"read the plugin's CPU time\" failed: " + err.Error(), dep}
	}
	u := use(s0, s1, time.Since(t0))
	msg := fmt.Sprintf("%.3f CPU seconds per second of its own run (budget %.3f): %.3fs on a CPU in %s less %.3fs it waited for a CPU held by other work; %d threads, %d voluntary and %d involuntary context switches",
		u.perSecond(), r.t.CPULimit, u.cpu.Seconds(), fmtDuration(u.wall), u.wait.Seconds(), u.threads, u.vol, u.nonvol)
	if u.saturated() {
		how := "mostly went to sleep: counted as CPU seconds per wall second"
		if u.busy() {
			how = "mostly preempted, as a busy loop is: counted as 1"
		}
		msg += fmt.Sprintf("; its threads' waits, overlapping, fill the window, so its own run cannot be measured; its threads %s", how)
	}
	if u.lost > 0 {
		msg += fmt.Sprintf(" (%d threads ended in the window; their time is not counted)", u.lost)
	}
	if deaths := r.wd.since(since); len(deaths) > 0 {
		return Fail, append(append(deathsEvidence(deaths, since, what), msg), dep)
	}
	if u.perSecond() >= r.t.CPULimit {
		return Fail, []string{msg, "a watcher that busy-loops once kubelet.sock is re-created looks like this", dep}
	}
	return Pass, []string{msg, "no plugin process died " + what, dep}
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
	"after check 4's manager restart no plugin process dies, and the plugin's process tree uses less than 0.05 CPU seconds per second of its own run (time waiting for a CPU held by other work not counted) over 10s",
	"the kubelet only re-creates kubelet.sock on restart; a plugin that crashes then leaves its resource without devices until something restarts it, and one whose watcher breaks must not busy-loop",
	(*runner).checkIdleCPU}

func (r *runner) checkManagerAbsent() (Status, []string) {
	if len(r.resources) == 0 {
		return Skip, []string{errNoRegistration.Error()}
	}
	// Its own starting state: no manager, a fresh plugin process.
	r.proc.kill(5 * time.Second)
	r.reg.stop()
	if err := r.proc.start(); err != nil {
		return Error, []string{"suite step \"start a fresh plugin process\" failed: " + err.Error()}
	}
	started, pid := time.Now(), r.proc.pid()
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
		return Error, []string{"suite step \"start the manager probe\" failed: " + err.Error()}
	}
	appeared := time.Now()
	if early == "" {
		got, missing := r.waitAllAccepted(from, r.t.Register)
		if len(missing) == 0 {
			var ev []string
			for _, res := range r.resources {
				v := got[res]
				ev = append(ev, r.label(res)+fmt.Sprintf("registered %s after kubelet.sock appeared (%s after the start of pid %d), from pid %d",
					sinceStr(appeared, v.at), sinceStr(started, v.at), pid, v.pid))
			}
			// A plugin process that died meanwhile (a restart loop's child that gave up
			// before the manager appeared) fails the check: Run adds the watchdog's evidence.
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
		return Error, []string{early, "suite step \"restart the plugin as a restart loop would\" failed: " + err.Error()}
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
	"with the manager absent at start and appearing 3s later, a fresh plugin registers every resource within 5s of it, and no plugin process (a restart loop's children included) exits",
	"the kubelet's kubelet.sock may appear after the plugin starts (node boot, kubelet restart); the plugin must wait for it rather than exit",
	(*runner).checkManagerAbsent}

func (r *runner) checkSigterm() (Status, []string) {
	first, bad := r.fresh()
	if bad != nil {
		return bad.status, bad.evidence
	}
	ev := []string{first}
	var sockets []string
	for _, res := range r.resources {
		if cur, ok := r.lastAccepted(res); ok {
			sockets = append(sockets, cur.socket)
		}
	}
	sent := time.Now()
	if err := r.proc.signal(syscall.SIGTERM); err != nil {
		return Error, append([]string{"suite step \"send SIGTERM\" failed: " + err.Error()}, ev...)
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
