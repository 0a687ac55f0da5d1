package conformance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/kdm-project/kdm/endpoint"
)

// PluginArgs returns the command line the plugin is started with.
func (c Config) PluginArgs() []string {
	argv := make([]string, 0, len(c.Command)+1)
	for _, a := range c.Command {
		argv = append(argv, strings.ReplaceAll(a, "{dir}", c.Dir))
	}
	if c.DirFlag != "" {
		argv = append(argv, "--"+c.DirFlag+"="+c.Dir)
	}
	return argv
}

// runner holds one run's state; its checks run one after another on one goroutine.
type runner struct {
	cfg  Config
	t    Timings
	ctx  context.Context
	reg  *registrar
	proc *pluginProcess
	wd   *watchdog
	// resources are the resources the plugin registered in check 1, in the order of their
	// first Register call; a plugin process may serve several, and each is checked apart.
	resources []string
	// first maps each resource to its first accepted registration (an index into the
	// registrar's list).
	first map[string]int
	// restartedAt is when check 4 stopped the manager probe (zero before).
	restartedAt time.Time
}

// Run starts the manager probe and the plugin, runs every check in the order that keeps one
// plugin process alive the longest (each check restarts the plugin itself only if an
// earlier one left it dead), and returns the report, checks sorted by ID. A plugin process
// that dies without the suite signalling or killing it fails the check during which it died
// (unless that check was skipped), with the plugin's last stderr lines as evidence. The
// plugin's process group is killed and the probe stopped before Run returns. An error means
// the run could not be set up (bad config, the directory or the command unusable); a plugin
// that misbehaves is a FAIL in the report, not an error. ctx cancels the run: the checks not
// run yet are reported SKIP.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.PluginOutput == nil {
		cfg.PluginOutput = io.Discard
	}
	if cfg.Logger.GetSink() == nil {
		cfg.Logger = klog.LoggerWithName(klog.Background(), "conformance").V(10)
	}
	r := &runner{cfg: cfg, t: cfg.Timings.withDefaults(), ctx: ctx, first: map[string]int{}}
	env := os.Environ()
	if cfg.DirEnv != "" {
		env = append(env, cfg.DirEnv+"="+cfg.Dir)
	}
	r.proc = &pluginProcess{argv: cfg.PluginArgs(), env: env, out: cfg.PluginOutput, stderr: &tailBuffer{}}
	epCfg := endpoint.Config{DialTimeout: r.t.Register, OptionsTimeout: r.t.Register, Logger: cfg.Logger}
	r.reg = newRegistrar(cfg.Dir, cfg.Logger, epCfg, r.proc.count)
	r.wd = newWatchdog(r.proc, r.reg)
	rep := &Report{Command: r.proc.argv, Dir: cfg.Dir, Started: time.Now()}
	if err := r.reg.start(); err != nil {
		return nil, err
	}
	defer r.reg.stop()
	defer r.proc.kill(5 * time.Second)
	if err := r.proc.start(); err != nil {
		return nil, err
	}
	r.wd.start()
	defer r.wd.stop()
	for _, c := range checkOrder() {
		res := Result{ID: c.id, Name: c.name, Title: c.title, Kubelet: c.kubelet}
		start := time.Now()
		if ctx.Err() != nil {
			res.Status, res.Evidence = Skip, []string{"run cancelled: " + ctx.Err().Error()}
		} else {
			mark := r.wd.count()
			res.Status, res.Evidence = c.run(r)
			r.wd.poll()
			if res.Status != Skip {
				res.Status, res.Evidence = withDeaths(res.Status, res.Evidence, r.wd.unreported(mark), start)
			}
		}
		res.Duration = time.Since(start)
		rep.Checks = append(rep.Checks, res)
	}
	sort.Slice(rep.Checks, func(i, j int) bool { return rep.Checks[i].ID < rep.Checks[j].ID })
	rep.Resources = append([]string(nil), r.resources...)
	if len(r.resources) > 0 {
		rep.ResourceName = r.resources[0]
	}
	rep.Duration = time.Since(rep.Started)
	return rep, nil
}

// withDeaths makes a check that saw plugin processes die a FAIL: their evidence comes first
// when the check had passed or warned, after the check's own when it had failed already.
func withDeaths(st Status, ev []string, deaths []death, since time.Time) (Status, []string) {
	if len(deaths) == 0 {
		return st, ev
	}
	var dev []string
	for _, d := range deaths {
		dev = append(dev, d.evidence(since, "into the check")...)
	}
	if st == Fail {
		return Fail, append(ev, dev...)
	}
	return Fail, append(dev, ev...)
}

// sleep waits d or until the run is cancelled; it reports whether d passed.
func (r *runner) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.ctx.Done():
		return false
	}
}

// label prefixes a resource's evidence with its name when the plugin serves several.
func (r *runner) label(resource string) string {
	if len(r.resources) > 1 {
		return resource + ": "
	}
	return ""
}

// settle waits until no Register call has come for Settle, but no longer than Register after
// the first one, and returns the registrations then: what a plugin registers as it starts
// (every resource, and any duplicate) is seen before a check disturbs it.
func (r *runner) settle(snap []regView) []regView {
	limit := snap[0].at.Add(r.t.Register)
	for {
		n := len(snap)
		until := snap[n-1].at.Add(r.t.Settle)
		if until.After(limit) {
			until = limit
		}
		d := time.Until(until)
		if d <= 0 {
			return snap
		}
		var more bool
		snap, more = r.reg.waitFor(r.ctx, d, func(s []regView) bool { return len(s) > n })
		if !more {
			return snap
		}
	}
}

// waitAccepted waits up to timeout for an accepted registration of resource at index >= from
// and returns it.
func (r *runner) waitAccepted(from int, resource string, timeout time.Duration) (regView, bool) {
	snap, ok := r.reg.waitFor(r.ctx, timeout, func(s []regView) bool { return acceptedFrom(s, from, resource) >= 0 })
	if !ok {
		return regView{}, false
	}
	return snap[acceptedFrom(snap, from, resource)], true
}

// waitAllAccepted waits up to timeout for an accepted registration at index >= from of every
// resource. It returns the first one of each resource that has one, and the resources that
// have none, in check-1 order.
func (r *runner) waitAllAccepted(from int, timeout time.Duration) (map[string]regView, []string) {
	all := func(s []regView) bool {
		for _, res := range r.resources {
			if acceptedFrom(s, from, res) < 0 {
				return false
			}
		}
		return true
	}
	snap, _ := r.reg.waitFor(r.ctx, timeout, all)
	got := map[string]regView{}
	var missing []string
	for _, res := range r.resources {
		if i := acceptedFrom(snap, from, res); i >= 0 {
			got[res] = snap[i]
		} else {
			missing = append(missing, res)
		}
	}
	return got, missing
}

// acceptedFrom returns the index of the first accepted registration of resource at index >=
// from, or -1.
func acceptedFrom(s []regView, from int, resource string) int {
	for i := from; i < len(s); i++ {
		if s[i].accepted() && s[i].req.ResourceName == resource {
			return i
		}
	}
	return -1
}

// waitLists waits up to timeout for registration i to have received at least n lists, or for
// its stream to end short of them; it reports whether the lists came.
func (r *runner) waitLists(i, n int, timeout time.Duration) (regView, bool) {
	snap, _ := r.reg.waitFor(r.ctx, timeout, func(s []regView) bool { return len(s[i].lists) >= n || !s[i].streamEnd.IsZero() })
	return snap[i], len(snap[i].lists) >= n
}

// current returns the latest accepted registration of resource whose stream is still open.
func (r *runner) current(resource string) (regView, bool) {
	snap := r.reg.snapshot()
	for i := len(snap) - 1; i >= 0; i-- {
		if v := snap[i]; v.accepted() && v.req.ResourceName == resource && v.streamEnd.IsZero() {
			return v, true
		}
	}
	return regView{}, false
}

// lastAccepted returns the latest accepted registration of resource, its stream open or not.
func (r *runner) lastAccepted(resource string) (regView, bool) {
	snap := r.reg.snapshot()
	for i := len(snap) - 1; i >= 0; i-- {
		if snap[i].accepted() && snap[i].req.ResourceName == resource {
			return snap[i], true
		}
	}
	return regView{}, false
}

// errNoRegistration is the SKIP reason of the checks that need check 1's registration.
var errNoRegistration = errors.New("no accepted registration (check 1)")

// ensureRegistered makes sure the manager probe runs, the plugin runs and every resource of
// check 1 has a live registration, restarting the plugin if it has exited (as a restart loop
// would). It returns the check's first evidence, a note when it had to act (nil when it did
// not), and an error when the plugin cannot be brought back.
func (r *runner) ensureRegistered() (ev []string, err error) {
	if len(r.resources) == 0 {
		return nil, errNoRegistration
	}
	if !r.reg.running() {
		if err := r.reg.start(); err != nil {
			return nil, err
		}
	}
	if r.proc.alive() {
		if r.allRegisteredNow() {
			return nil, nil
		}
		if _, missing := r.waitAllAccepted(len(r.reg.snapshot()), r.t.Register); len(missing) == 0 {
			return nil, nil
		}
		// Alive but not registered: restart it as a supervisor would.
		r.proc.kill(5 * time.Second)
	}
	status := r.proc.exitStatus()
	from := len(r.reg.snapshot())
	if err := r.proc.start(); err != nil {
		return nil, err
	}
	if _, missing := r.waitAllAccepted(from, r.t.Register); len(missing) > 0 {
		return nil, fmt.Errorf("the plugin (%s) was restarted to continue but did not register %s within %v",
			status, quoteList(missing), r.t.Register)
	}
	return []string{fmt.Sprintf("the plugin had stopped serving (%s); restarted it to continue", status)}, nil
}

// allRegisteredNow reports whether every resource's latest accepted registration came from
// the current plugin instance to the current manager probe.
func (r *runner) allRegisteredNow() bool {
	for _, res := range r.resources {
		v, ok := r.lastAccepted(res)
		if !ok || v.process != r.proc.count() || v.generation != r.reg.currentGeneration() {
			return false
		}
	}
	return true
}

// quoteList formats names as "a", "b".
func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return strings.Join(q, ", ")
}

// worse returns the worse of two verdicts of one check: FAIL over WARN over PASS over SKIP
// (a check that applied to one resource and not another passed).
func worse(a, b Status) Status {
	rank := map[Status]int{Skip: 0, Pass: 1, Warn: 2, Fail: 3}
	if rank[b] > rank[a] {
		return b
	}
	return a
}

// sinceStr formats the time from a to b in seconds with two decimals.
func sinceStr(a, b time.Time) string {
	return fmt.Sprintf("%.2fs", b.Sub(a).Seconds())
}
