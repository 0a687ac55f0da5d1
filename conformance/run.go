package conformance

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
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
	// first is the first accepted registration (index into the registrar's list), or -1.
	first int
}

// Run starts the manager probe and the plugin, runs every check in the order that keeps one
// plugin process alive the longest (each check restarts the plugin itself only if an
// earlier one left it dead), and returns the report, checks sorted by ID. The plugin's
// process group is killed and the probe stopped before Run returns. An error means the run
// could not be set up (bad config, the directory or the command unusable); a plugin that
// misbehaves is a FAIL in the report, not an error. ctx cancels the run: the checks not run
// yet are reported SKIP.
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
	r := &runner{cfg: cfg, t: cfg.Timings.withDefaults(), ctx: ctx, first: -1}
	env := os.Environ()
	if cfg.DirEnv != "" {
		env = append(env, cfg.DirEnv+"="+cfg.Dir)
	}
	r.proc = &pluginProcess{argv: cfg.PluginArgs(), env: env, out: cfg.PluginOutput}
	epCfg := endpoint.Config{DialTimeout: r.t.Register, OptionsTimeout: r.t.Register, Logger: cfg.Logger}
	r.reg = newRegistrar(cfg.Dir, cfg.Logger, epCfg, r.proc.count)
	rep := &Report{Command: r.proc.argv, Dir: cfg.Dir, Started: time.Now()}
	if err := r.reg.start(); err != nil {
		return nil, err
	}
	defer r.reg.stop()
	defer r.proc.kill(5 * time.Second)
	if err := r.proc.start(); err != nil {
		return nil, err
	}
	for _, c := range checkOrder() {
		res := Result{ID: c.id, Name: c.name, Title: c.title, Kubelet: c.kubelet}
		start := time.Now()
		if ctx.Err() != nil {
			res.Status, res.Evidence = Skip, []string{"run cancelled: " + ctx.Err().Error()}
		} else {
			res.Status, res.Evidence = c.run(r)
		}
		res.Duration = time.Since(start)
		rep.Checks = append(rep.Checks, res)
	}
	sort.Slice(rep.Checks, func(i, j int) bool { return rep.Checks[i].ID < rep.Checks[j].ID })
	if r.first >= 0 {
		rep.ResourceName = r.reg.snapshot()[r.first].req.ResourceName
	}
	rep.Duration = time.Since(rep.Started)
	return rep, nil
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

// waitAccepted waits up to timeout for an accepted registration at index >= from and returns
// it.
func (r *runner) waitAccepted(from int, timeout time.Duration) (regView, bool) {
	snap, ok := r.reg.waitFor(r.ctx, timeout, func(s []regView) bool { return acceptedFrom(s, from) >= 0 })
	if !ok {
		return regView{}, false
	}
	return snap[acceptedFrom(snap, from)], true
}

func acceptedFrom(s []regView, from int) int {
	for i := from; i < len(s); i++ {
		if s[i].accepted() {
			return i
		}
	}
	return -1
}

// waitLists waits up to timeout for registration i to have received at least n lists.
func (r *runner) waitLists(i, n int, timeout time.Duration) (regView, bool) {
	snap, ok := r.reg.waitFor(r.ctx, timeout, func(s []regView) bool { return len(s[i].lists) >= n })
	return snap[i], ok
}

// current returns the latest accepted registration whose stream is still open.
func (r *runner) current() (regView, bool) {
	snap := r.reg.snapshot()
	for i := len(snap) - 1; i >= 0; i-- {
		if v := snap[i]; v.accepted() && v.streamEnd.IsZero() {
			return v, true
		}
	}
	return regView{}, false
}

// lastAccepted returns the latest accepted registration, its stream open or not.
func (r *runner) lastAccepted() (regView, bool) {
	snap := r.reg.snapshot()
	for i := len(snap) - 1; i >= 0; i-- {
		if snap[i].accepted() {
			return snap[i], true
		}
	}
	return regView{}, false
}

// ensureRegistered makes sure the manager probe runs, the plugin runs and it has a live
// registration, restarting the plugin if it has exited (as a restart loop would). It returns
// the check's first evidence, a note when it had to act (nil when it did not), and an error
// when the plugin cannot be brought back.
func (r *runner) ensureRegistered() (ev []string, err error) {
	if !r.reg.running() {
		if err := r.reg.start(); err != nil {
			return nil, err
		}
	}
	if r.proc.alive() {
		if v, ok := r.lastAccepted(); ok && v.process == r.proc.count() && v.generation == r.reg.currentGeneration() {
			return nil, nil
		}
		if _, ok := r.waitAccepted(len(r.reg.snapshot()), r.t.Register); ok {
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
	if _, ok := r.waitAccepted(from, r.t.Register); !ok {
		return nil, fmt.Errorf("the plugin (%s) was restarted to continue but did not register within %v", status, r.t.Register)
	}
	return []string{fmt.Sprintf("the plugin had stopped serving (%s); restarted it to continue", status)}, nil
}

// sinceStr formats the time from a to b in seconds with two decimals.
func sinceStr(a, b time.Time) string {
	return fmt.Sprintf("%.2fs", b.Sub(a).Seconds())
}
