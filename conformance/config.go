package conformance

import (
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"k8s.io/klog/v2"
)

// Timings are the bounds the checks apply. The defaults are the numbers of the check list in
// docs/conformance.md; tests shorten the ones that only set how long the suite watches
// (CPUWindow, ManagerDelay, StreamCloseWindow). A zero field takes its default; a negative one
// is invalid (see Config.Validate).
type Timings struct {
	// Register bounds the first registration after start (check 1), the re-registration after a
	// manager restart for a PASS (check 4) and the registration once the manager appears
	// (check 5). Default 5s.
	Register time.Duration
	// RegisterWarn bounds the re-registration after a restart for a WARN (check 4). Default 15s,
	// or Register when that is longer; a RegisterWarn that is set must not be shorter than
	// Register.
	RegisterWarn time.Duration
	// Settle is how long check 1 waits, after the latest Register call, for more (the other
	// resources of a plugin that serves several, a duplicate Register), at most Register after
	// the first call. Every later check works on what it saw. Default 1s.
	Settle time.Duration
	// FirstList bounds the first ListAndWatch list after a registration. Default 5s.
	FirstList time.Duration
	// ManagerDelay is how long the manager stays absent after the plugin starts (check 5).
	// Default 3s.
	ManagerDelay time.Duration
	// StreamCloseWindow is how long the plugin is watched after its stream is closed (check 6):
	// a plugin that stops serving within it fails. Default 5s.
	StreamCloseWindow time.Duration
	// CPUWindow is the idle window measured after a restart (check 8). Default 10s.
	CPUWindow time.Duration
	// CPULimit is the budget of check 8: the CPU seconds the plugin's process tree may use
	// per second of its own run (time spent waiting for a CPU held by other work not
	// counted); at or above it the check fails. Default 0.05.
	CPULimit float64
	// Term bounds the exit after SIGTERM (check 9). Default 5s.
	Term time.Duration
	// Health bounds a health change reaching the manager (check 10). Default 5s.
	Health time.Duration
	// Command bounds each --health-trigger and --health-restore command; one killed at this
	// bound makes check 10 an ERROR. Default 30s.
	Command time.Duration
	// RPC bounds each Allocate, GetPreferredAllocation and PreStartContainer call (check 3).
	// Default 10s.
	RPC time.Duration
}

// DefaultTimings are the bounds of the check list.
func DefaultTimings() Timings {
	return Timings{Register: 5 * time.Second, RegisterWarn: 15 * time.Second, Settle: time.Second, FirstList: 5 * time.Second,
		ManagerDelay: 3 * time.Second, StreamCloseWindow: 5 * time.Second, CPUWindow: 10 * time.Second,
		CPULimit: 0.05, Term: 5 * time.Second, Health: 5 * time.Second, Command: 30 * time.Second, RPC: 10 * time.Second}
}

// durations lists t's duration fields with their names and defaults, in declaration order.
func (t *Timings) durations() []timing {
	d := DefaultTimings()
	return []timing{{"Register", &t.Register, d.Register}, {"RegisterWarn", &t.RegisterWarn, d.RegisterWarn},
		{"Settle", &t.Settle, d.Settle}, {"FirstList", &t.FirstList, d.FirstList}, {"ManagerDelay", &t.ManagerDelay, d.ManagerDelay},
		{"StreamCloseWindow", &t.StreamCloseWindow, d.StreamCloseWindow}, {"CPUWindow", &t.CPUWindow, d.CPUWindow},
		{"Term", &t.Term, d.Term}, {"Health", &t.Health, d.Health}, {"Command", &t.Command, d.Command}, {"RPC", &t.RPC, d.RPC}}
}

// timing is one duration field of Timings.
type timing struct {
	name string
	v    *time.Duration
	def  time.Duration
}

// withDefaults returns t with every zero field set to its default. A zero RegisterWarn becomes
// the longer of its default and Register.
func (t Timings) withDefaults() Timings {
	warnUnset := t.RegisterWarn == 0
	for _, f := range t.durations() {
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	if t.CPULimit == 0 {
		t.CPULimit = DefaultTimings().CPULimit
	}
	if warnUnset && t.RegisterWarn < t.Register {
		t.RegisterWarn = t.Register
	}
	return t
}

// validate reports t's invalid values in field order: negative durations, a negative or NaN
// CPULimit, and a RegisterWarn shorter than Register once defaults are applied.
func (t Timings) validate() []error {
	var errs []error
	for _, f := range t.durations() {
		if *f.v < 0 {
			errs = append(errs, fmt.Errorf("timings: %s must not be negative, got %v", f.name, *f.v))
		}
	}
	switch {
	case math.IsNaN(t.CPULimit):
		errs = append(errs, errors.New("timings: CPULimit must be a number, got NaN"))
	case t.CPULimit < 0:
		errs = append(errs, fmt.Errorf("timings: CPULimit must not be negative, got %v", t.CPULimit))
	}
	if d := t.withDefaults(); t.Register >= 0 && t.RegisterWarn >= 0 && d.RegisterWarn < d.Register {
		errs = append(errs, fmt.Errorf("timings: RegisterWarn (%v) must not be shorter than Register (%v)",
			d.RegisterWarn, d.Register))
	}
	return errs
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

// Validate reports every invalid value in c, joined with errors.Join in the order the fields
// are declared (Timings' in its own field order). It changes nothing; zero Timings fields are
// valid and take their defaults.
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
	errs = append(errs, c.Timings.validate()...)
	return errors.Join(errs...)
}
