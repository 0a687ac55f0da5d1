package conformance

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

func (r *runner) checkHealth() (Status, []string) {
	if r.cfg.HealthTrigger == "" {
		return Skip, []string{"not configured (--health-trigger, --health-restore)"}
	}
	first, bad := r.fresh()
	if bad != nil {
		return bad.status, bad.evidence
	}
	ev := []string{first}
	// The first resource's devices: one health change shows the plugin's path to the manager.
	res := r.resources[0]
	if len(r.resources) > 1 {
		ev = append(ev, fmt.Sprintf("resource %q (the first registered)", res))
	}
	cur, ok := r.current(res)
	if !ok {
		return Fail, append(ev, "no live registration of "+strconv.Quote(res))
	}
	cur, ok = r.waitLists(cur.index, 1, r.t.FirstList)
	if !ok {
		return Fail, append(ev, "no device list to start from")
	}
	var dev string
	for _, d := range cur.latest() {
		if d.Health == pluginapi.Healthy {
			dev = d.ID
			break
		}
	}
	if dev == "" {
		return Skip, append(ev, "no healthy device to make unhealthy")
	}
	healthOf := func(v regView) string {
		for _, d := range v.latest() {
			if d.ID == dev {
				return d.Health
			}
		}
		return ""
	}
	for _, step := range []struct {
		name, cmd, want string
	}{{"health trigger", r.cfg.HealthTrigger, pluginapi.Unhealthy}, {"health restore", r.cfg.HealthRestore, pluginapi.Healthy}} {
		if step.cmd == "" {
			continue
		}
		t0 := time.Now()
		if out, err := r.shell(step.cmd, res, dev); err != nil {
			// The suite's own step: no verdict on the plugin can be reached.
			return Error, append([]string{fmt.Sprintf("suite step %q (%q) failed after %s: %v: %s",
				step.name, step.cmd, sinceStr(t0, time.Now()), err, out)}, ev...)
		}
		snap, ok := r.reg.waitFor(r.ctx, r.t.Health, func(s []regView) bool { return healthOf(s[cur.index]) == step.want })
		if !ok {
			return Fail, append(ev, fmt.Sprintf("device %s not reported %s within %v of %q (last: %q)",
				dev, step.want, r.t.Health, step.cmd, healthOf(snap[cur.index])))
		}
		ev = append(ev, fmt.Sprintf("device %s reported %s %s after %q", dev, step.want, sinceStr(t0, time.Now()), step.cmd))
	}
	return Pass, ev
}

// healthCheck is check 10, run by checkHealth above.
var healthCheck = check{10, "health",
	"a health change (--health-trigger / --health-restore) reaches the manager within 5s",
	"the kubelet's genericDeviceUpdateCallback moves devices between healthy and unhealthy only when ListAndWatch sends a new list",
	(*runner).checkHealth}

// shell runs cmd with sh -c, telling it the resource, the device and the directory; it is
// killed after Timings.Command.
func (r *runner) shell(cmd, resource, dev string) (string, error) {
	ctx, cancel := context.WithTimeout(r.ctx, r.t.Command)
	defer cancel()
	c := exec.CommandContext(ctx, "sh", "-c", cmd)
	c.Env = append(os.Environ(), "KDM_CONFORMANCE_RESOURCE="+resource, "KDM_CONFORMANCE_DEVICE="+dev, "KDM_CONFORMANCE_DIR="+r.cfg.Dir)
	out, err := c.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func (r *runner) checkDuplicates() (Status, []string) {
	first, bad := r.fresh()
	if bad != nil {
		return bad.status, bad.evidence
	}
	snap := r.reg.snapshot()
	var ev, watched []string
	for _, w := range r.windows {
		watched = append(watched, fmt.Sprintf("%s: %d Register calls, watched %s from the first until none came for %v",
			w.who, w.to-w.from, sinceStr(w.start, w.quiet), r.t.Settle))
		ev = append(ev, duplicatesIn(snap[w.from:w.to])...)
	}
	watched = append(watched, first)
	if len(ev) > 0 {
		return Warn, append(ev, watched...)
	}
	return Pass, append([]string{"no duplicate registrations at start"}, watched...)
}

// duplicatesIn lists the Register calls of regs (one watched start-up) that came while the
// same process's previous registration of the same resource with the same manager still
// streamed, with the time between the two.
func duplicatesIn(regs []regView) []string {
	var ev []string
	for i, b := range regs {
		for j := i - 1; j >= 0; j-- {
			a := regs[j]
			if a.generation != b.generation || a.process != b.process || a.pid != b.pid || a.req.ResourceName != b.req.ResourceName {
				continue
			}
			if a.accepted() && (a.closedAt.IsZero() || a.closedAt.After(b.at)) &&
				(a.streamEnd.IsZero() || a.streamEnd.After(b.at)) {
				ev = append(ev, fmt.Sprintf("Register #%d for %q came %s after #%d (both from pid %d) while the first connection was still streaming",
					b.index+1, b.req.ResourceName, sinceStr(a.at, b.at), a.index+1, b.pid))
			}
			break
		}
	}
	return ev
}

// duplicatesCheck is check 7, run by checkDuplicates above.
var duplicatesCheck = check{7, "duplicate-registration",
	"no duplicate Register calls in a row while the first still streams, watched at check 1's start and at a fresh start of its own until none came for 1s (WARN)",
	"the kubelet's connectClient overwrites the client of a re-registered resource and leaves the old stream open; when that old stream ends, runClient disconnects the new client, marking the resource's devices unhealthy",
	(*runner).checkDuplicates}
