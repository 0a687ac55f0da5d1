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
	// restartedPID is the plugin process check 4 restarted the manager under (check 8
	// measures it).
	restartedPID int
	// checkID is the check running.
	checkID int
	// windows are the start-ups watched until no Register came for Settle (check 1's and
	// each fresh start's); check 7 judges the Register calls inside them.
	windows []settled
}

// settled is one watched start-up: the registrations at indexes from to to-1, the first of
// them at start, and when the watch ended.
type settled struct {
	who          string
	from, to     int
	start, quiet time.Time
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
			r.checkID = c.id
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
// the call at index from, and returns the registrations from that index on: what a plugin
// registers as it starts (every resource, and any duplicate) is seen before a check disturbs
// it. The watch is kept for check 7.
func (r *runner) settle(from int) []regView {
	snap := r.reg.snapshot()
	limit := snap[from].at.Add(r.t.Register)
	for {
		n := len(snap)
		until := snap[n-1].at.Add(r.t.Settle)
		if until.After(limit) {
			until = limit
		}
		d := time.Until(until)
		if d <= 0 {
			break
		}
		var more bool
		snap, more = r.reg.waitFor(r.ctx, d, func(s []regView) bool { return len(s) > n })
		if !more {
			break
		}
	}
	r.windows = append(r.windows, settled{who: fmt.Sprintf("start of pid %d (check %d)", r.proc.pid(), r.checkID),
		from: from, to: len(snap), start: snap[from].at, quiet: time.Now()})
	return snap[from:]
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

// setup is what fresh reports when it cannot give a check its starting state: the check's
// verdict (SKIP without check 1's registration, FAIL when the plugin does not register,
// ERROR when the suite's own step failed) and the evidence.
type setup struct {
	status   Status
	evidence []string
}

// fresh gives a check its own starting state, whatever earlier checks did: it ends the
// plugin process and the manager probe, starts the probe afresh (which removes every socket,
// as the kubelet's start does), starts a new plugin process, waits for every resource of
// check 1 to register and then, as check 1 does, until no Register call has come for Settle
// (so that a late duplicate is not raced by the check's first step). It returns the check's
// first line of evidence, naming the new process.
func (r *runner) fresh() (string, *setup) {
	if len(r.resources) == 0 {
		return "", &setup{Skip, []string{errNoRegistration.Error()}}
	}
	r.proc.kill(5 * time.Second)
	r.reg.stop()
	if err := r.reg.start(); err != nil {
		return "", &setup{Error, []string{"suite step \"start the manager probe\" failed: " + err.Error()}}
	}
	from := len(r.reg.snapshot())
	started := time.Now()
	if err := r.proc.start(); err != nil {
		return "", &setup{Error, []string{"suite step \"start a fresh plugin process\" failed: " + err.Error()}}
	}
	pid := r.proc.pid()
	got, missing := r.waitAllAccepted(from, r.t.Register)
	if len(missing) > 0 {
		msg := fmt.Sprintf("a fresh plugin process (pid %d) did not register %s within %v of its start", pid, quoteList(missing), r.t.Register)
		if !r.proc.alive() {
			msg += "; it exited: " + r.proc.exitStatus()
		}
		return "", &setup{Fail, []string{msg}}
	}
	last := started
	for _, v := range got {
		if v.at.After(last) {
			last = v.at
		}
	}
	r.settle(from)
	return fmt.Sprintf("from a fresh plugin process (pid %d), registered %s after its start", pid, sinceStr(started, last)), nil
}

// onFirstProcess is the dependency line of checks 2 and 3, which work on check 1's
// registrations from the plugin's first process, before any check disturbs it.
func (r *runner) onFirstProcess() string {
	snap := r.reg.snapshot()
	pid := 0
	if i, ok := r.first[r.resources[0]]; ok {
		pid = snap[i].pid
	}
	return fmt.Sprintf("depends on check 1: its registration by the first plugin process (pid %d), undisturbed", pid)
}

// quoteList formats names as "a", "b".
func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return strings.Join(q, ", ")
}

// worse returns the worse of two verdicts of one check: FAIL over ERROR over WARN over PASS
// over SKIP (a check that applied to one resource and not another passed).
func worse(a, b Status) Status {
	rank := map[Status]int{Skip: 0, Pass: 1, Warn: 2, Error: 3, Fail: 4}
	if rank[b] > rank[a] {
		return b
	}
	return a
}

// sinceStr formats the time from a to b in seconds with two decimals.
func sinceStr(a, b time.Time) string {
	return fmt.Sprintf("%.2fs", b.Sub(a).Seconds())
}
