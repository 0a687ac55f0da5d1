package deploy

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// installFiles runs `make install-files` with every path under a fresh directory, puts stub
// executables where the units' ExecStart look, and returns the directory.
func installFiles(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("make"); err != nil {
		t.Fatalf("make is needed to install the units: %v", err)
	}
	root := t.TempDir()
	cmd := exec.Command("make", "-s", "-C", "..", "install-files", "DESTDIR=", "PREFIX="+root, "SYSCONFDIR="+filepath.Join(root, "etc"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make install-files: %v\n%s", err, out)
	}
	if err := os.MkdirAll(filepath.Join(root, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"kdm", "kdm-nvml-plugin"} {
		if err := os.WriteFile(filepath.Join(root, "bin", b), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// unitKeys reads a unit's Key=Value lines (sections ignored; a later key overwrites).
func unitKeys(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	keys := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") || strings.HasPrefix(l, "[") {
			continue
		}
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			t.Fatalf("%s: line %q is not Key=Value", path, l)
		}
		keys[k] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return keys
}

// TestKdmUnitContract: the installed kdm.service restarts kdm on failure, reads its flags from
// the installed environment file, runs the installed binary, and gives kdm longer to stop than
// the --shutdown-timeout it passes, so that systemd never kills a clean stop.
func TestKdmUnitContract(t *testing.T) {
	root := installFiles(t)
	keys := unitKeys(t, filepath.Join(root, "lib/systemd/system/kdm.service"))
	if keys["Restart"] != "on-failure" {
		t.Errorf("Restart=%q, want on-failure", keys["Restart"])
	}
	env := filepath.Join(root, "etc/default/kdm")
	if keys["EnvironmentFile"] != "-"+env {
		t.Errorf("EnvironmentFile=%q, want -%s", keys["EnvironmentFile"], env)
	}
	if _, err := os.Stat(env); err != nil {
		t.Errorf("the flags file was not installed: %v", err)
	}
	exec := keys["ExecStart"]
	if !strings.HasPrefix(exec, filepath.Join(root, "bin/kdm")+" run ") || !strings.Contains(exec, "$KDM_ARGS") {
		t.Errorf("ExecStart=%q, want %s run ... $KDM_ARGS", exec, filepath.Join(root, "bin/kdm"))
	}
	m := regexp.MustCompile(`--shutdown-timeout=(\S+)`).FindStringSubmatch(exec)
	if m == nil {
		t.Fatalf("ExecStart=%q sets no --shutdown-timeout", exec)
	}
	shutdown, err := time.ParseDuration(m[1])
	if err != nil {
		t.Fatal(err)
	}
	stop, err := time.ParseDuration(keys["TimeoutStopSec"])
	if err != nil {
		t.Fatalf("TimeoutStopSec=%q: %v", keys["TimeoutStopSec"], err)
	}
	if stop <= shutdown {
		t.Errorf("TimeoutStopSec=%v is not above --shutdown-timeout=%v: systemd would kill kdm during a clean stop", stop, shutdown)
	}
}

// TestFlagsFilesAssignOnly: the environment files hold only comments and NAME="value" lines,
// the only form systemd's EnvironmentFile reads as the units expect (it expands nothing).
func TestFlagsFilesAssignOnly(t *testing.T) {
	line := regexp.MustCompile(`^[A-Z_]+="[^"$]*"$`)
	for _, f := range []string{"kdm.env", "kdm-nvml-plugin.env"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, l := range strings.Split(string(b), "\n") {
			if l == "" || strings.HasPrefix(l, "#") {
				continue
			}
			if !line.MatchString(l) {
				t.Errorf("%s:%d: %q is not NAME=\"value\" without $", f, i+1, l)
			}
		}
	}
}

// TestUnitsVerify runs systemd-analyze verify on the installed units, where systemd is
// installed.
func TestUnitsVerify(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed (Debian: apt-get install systemd); the units are checked only by TestKdmUnitContract")
	}
	root := installFiles(t)
	units := []string{filepath.Join(root, "lib/systemd/system/kdm.service"), filepath.Join(root, "lib/systemd/system/kdm-nvml-plugin.service")}
	out, err := exec.Command(analyze, append([]string{"verify"}, units...)...).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}
