package conformance

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"
)

// TestConfigValidate covers every rejection of Config.Validate with its message, one row per
// branch, and checks that several errors come back in field order and that Run refuses an
// invalid Config before it starts anything.
func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want []string // nil for a valid config
	}{
		{"minimal", validConfig(nil), nil},
		{"defaults spelled out", validConfig(func(c *Config) { c.Timings = DefaultTimings() }), nil},
		{"long Register, zero RegisterWarn", validConfig(func(c *Config) { c.Timings.Register = time.Minute }), nil},
		{"no command", validConfig(func(c *Config) { c.Command = nil }), []string{"no plugin command given"}},
		{"empty command", validConfig(func(c *Config) { c.Command = []string{""} }), []string{"no plugin command given"}},
		{"no dir", validConfig(func(c *Config) { c.Dir = "" }),
			[]string{`plugin directory must be an absolute path: ""`}},
		{"relative dir", validConfig(func(c *Config) { c.Dir = "plugins" }),
			[]string{`plugin directory must be an absolute path: "plugins"`}},
		{"dashed dir flag", validConfig(func(c *Config) { c.DirFlag = "--dir" }),
			[]string{`--dir-flag takes the flag's name without dashes: "--dir"`}},
		{"restore without trigger", validConfig(func(c *Config) { c.HealthRestore = "true" }),
			[]string{"a health restore command needs a health trigger command"}},
		{"negative CPULimit", validConfig(func(c *Config) { c.Timings.CPULimit = -0.5 }),
			[]string{"timings: CPULimit must not be negative, got -0.5"}},
		{"NaN CPULimit", validConfig(func(c *Config) { c.Timings.CPULimit = math.NaN() }),
			[]string{"timings: CPULimit must be a number, got NaN"}},
		{"RegisterWarn below Register", validConfig(func(c *Config) {
			c.Timings.Register, c.Timings.RegisterWarn = 10*time.Second, 2*time.Second
		}), []string{"timings: RegisterWarn (2s) must not be shorter than Register (10s)"}},
		{"RegisterWarn below the default Register", validConfig(func(c *Config) { c.Timings.RegisterWarn = time.Second }),
			[]string{"timings: RegisterWarn (1s) must not be shorter than Register (5s)"}},
		{"every negative duration, in field order", validConfig(func(c *Config) {
			c.Timings = Timings{RPC: -9, Health: -8, Term: -7, CPUWindow: -6, StreamCloseWindow: -5,
				ManagerDelay: -4, FirstList: -3, Settle: -10, RegisterWarn: -2, Register: -1}
		}), []string{
			"timings: Register must not be negative, got -1ns",
			"timings: RegisterWarn must not be negative, got -2ns",
			"timings: Settle must not be negative, got -10ns",
			"timings: FirstList must not be negative, got -3ns",
			"timings: ManagerDelay must not be negative, got -4ns",
			"timings: StreamCloseWindow must not be negative, got -5ns",
			"timings: CPUWindow must not be negative, got -6ns",
			"timings: Term must not be negative, got -7ns",
			"timings: Health must not be negative, got -8ns",
			"timings: RPC must not be negative, got -9ns",
		}},
		{"everything else, in field order", Config{Dir: "rel", DirFlag: "-d", HealthRestore: "x",
			Timings: Timings{CPULimit: -1}}, []string{
			"no plugin command given",
			`plugin directory must be an absolute path: "rel"`,
			`--dir-flag takes the flag's name without dashes: "-d"`,
			"a health restore command needs a health trigger command",
			"timings: CPULimit must not be negative, got -1",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() accepted %+v", tc.cfg)
			}
			if got := strings.Split(err.Error(), "\n"); strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Errorf("Validate() errors\n%q\nwant\n%q", got, tc.want)
			}
			if rep, rerr := Run(context.Background(), tc.cfg); rerr == nil || rerr.Error() != err.Error() {
				t.Errorf("Run() = %v, %v; want Validate's error", rep, rerr)
			}
		})
	}
}

// validConfig returns a valid Config changed by mod, if any.
func validConfig(mod func(*Config)) Config {
	c := Config{Command: []string{"true"}, Dir: "/run/kdm/device-plugins"}
	if mod != nil {
		mod(&c)
	}
	return c
}
