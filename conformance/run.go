package conformance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/kdm-project/kdm/endpoint"
)

// Timings are the bounds the checks apply. The defaults are the numbers of the check list in
// docs/conformance.md; tests shorten the ones that only set how long the suite watches
// (CPUWindow, ManagerDelay, StreamCloseWindow).
type Timings struct {
	// Register bounds the first registration after start (check 1), the re-registration after a
	// manager restart for a PASS (check 4) and the registration once the manager appears
	// (check 5). Default 5s.
	Register time.Duration
	// RegisterWarn bounds the re-registration after a restart for a WARN (check 4). Default 15s.
	RegisterWarn time.Duration
	// FirstList bounds the first ListAndWatch list after a registration. Default 5s.
	FirstList time.Duration
	// ManagerDelay is how long the manager stays absent after the plugin starts (check 5).
	// Default 3s.
	ManagerDelay time.Duration
	// StreamCloseWindow is how long the plugin is watched after its stream is closed (check 6).
	// Default 3s.
	StreamCloseWindow time.Duration
	// CPUWindow is the idle window measured after a restart (check 8). Default 10s.
	CPUWindow time.Duration
	// CPULimit is the largest idle CPU use that passes, as a fraction of one core. Default 0.05.
	CPULimit float64
	// Term bounds the exit after SIGTERM (check 9). Default 5s.
	Term time.Duration
	// Health bounds a health change reaching the manager (check 10). Default 5s.
	Health time.Duration
	// RPC bounds each Allocate, GetPreferredAllocation and PreStartContainer call (check 3).
	// Default 10s.
	RPC time.Duration
}

// DefaultTimings are the bounds of the check list.
func DefaultTimings() Timings {
	return Timings{Register: 5 * time.Second, RegisterWarn: 15 * time.Second, FirstList: 5 * time.Second,
		ManagerDelay: 3 * time.Second, StreamCloseWindow: 3 * time.Second, CPUWindow: 10 * time.Second,
		CPULimit: 0.05, Term: 5 * time.Second, Health: 5 * time.Second, RPC: 10 * time.Second}
}

func (t Timings) withDefaults() Timings {
	d := DefaultTimings()
	for _, f := range []struct{ v, def *time.Duration }{{&t.Register, &d.Register}, {&t.RegisterWarn, &d.RegisterWarn},
		{&t.FirstList, &d.FirstList}, {&t.ManagerDelay, &d.ManagerDelay}, {&t.StreamCloseWindow, &d.StreamCloseWindow},
		{&t.CPUWindow, &d.CPUWindow}, {&t.Term, &d.Term}, {&t.Health, &d.Health}, {&t.RPC, &d.RPC}} {
		if *f.v <= 0 {
			*f.v = *f.def
		}
	}
	if t.CPULimit <= 0 {
		t.CPULimit = d.CPULimit
	}
	if t.RegisterWarn < t.Register {
		t.RegisterWarn = t.Register
	}
	return t
}

// Config describes a conformance run.
type Config struct {
	// Command is the plugin command and its arguments. Required. Every argument "{dir}" is
	// replaced by the plugin directory.
	Command []string
	// Dir is the device-plugin directory: kubelet.sock is served there and the plugin's
	// socket is expected there. Required, absolute; created if missing. Every socket in it is
	// removed at each manager start, as the kubelet does.
	Dir string
	// DirFlag, if set, appends "--<DirFlag>=<Dir>" to the command.
	DirFlag string
	// DirEnv, if set, adds "<DirEnv>=<Dir>" to the plugin's environment.
	DirEnv string
	// HealthTrigger and HealthRestore are shell commands (sh -c) that make one device of the
	// plugin unhealthy and healthy again (check 10, skipped without HealthTrigger). They get
	// KDM_CONFORMANCE_DEVICE (a device ID the plugin listed) and KDM_CONFORMANCE_DIR.
	HealthTrigger, HealthRestore string
	// Timings are the check bounds; zero fields take DefaultTimings.
	Timings Timings
	// PluginOutput receives the plugin's stdout and stderr. Nil discards them.
	PluginOutput io.Writer
	// Logger receives the probe's logs. The zero Logger discards them.
	Logger klog.Logger
}

// Validate reports what is wrong with the configuration, if anything.
func (c Config) Validate() error {
	var errs []error
	if len(c.Command) == 0 || c.Command[0] == "" {
		errs = append(errs, errors.New("no plugin command given"))
	}
	if c.Dir == "" || !strings.HasPrefix(c.Dir, "/") {
		errs = append(errs, fmt.Errorf("plugin directory must be an absolute path: %q", c.Dir))
	}
	if c.DirFlag != "" && strings.HasPrefix(c.DirFlag, "-") {
		errs = append(errs, fmt.Errorf("--dir-flag takes the flag's name without dashes: %q", c.DirFlag))
	}
	if c.HealthRestore != "" && c.HealthTrigger == "" {
		errs = append(errs, errors.New("a health restore command needs a health trigger command"))
	}
	return errors.Join(errs...)
}

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
// a note for the evidence when it had to act, and an error when the plugin cannot be brought
// back.
func (r *runner) ensureRegistered() (note string, err error) {
	if !r.reg.running() {
		if err := r.reg.start(); err != nil {
			return "", err
		}
	}
	if r.proc.alive() {
		if v, ok := r.lastAccepted(); ok && v.process == r.proc.count() && v.generation == r.reg.currentGeneration() {
			return "", nil
		}
		if _, ok := r.waitAccepted(len(r.reg.snapshot()), r.t.Register); ok {
			return "", nil
		}
		// Alive but not registered: restart it as a supervisor would.
		r.proc.kill(5 * time.Second)
	}
	status := r.proc.exitStatus()
	from := len(r.reg.snapshot())
	if err := r.proc.start(); err != nil {
		return "", err
	}
	if _, ok := r.waitAccepted(from, r.t.Register); !ok {
		return "", fmt.Errorf("the plugin (%s) was restarted to continue but did not register within %v", status, r.t.Register)
	}
	return fmt.Sprintf("the plugin had stopped serving (%s); restarted it to continue", status), nil
}

// sinceStr formats the time from a to b in seconds with two decimals.
func sinceStr(a, b time.Time) string {
	return fmt.Sprintf("%.2fs", b.Sub(a).Seconds())
}
