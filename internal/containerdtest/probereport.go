package containerdtest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// ProbeLine is one line of the probe's report (see ./probe).
type ProbeLine struct {
	Kind    string `json:"kind"` // env, device, mount, write, ready
	Name    string `json:"name,omitempty"`
	Value   string `json:"value,omitempty"`
	Path    string `json:"path,omitempty"`
	Type    string `json:"type,omitempty"`
	Major   uint32 `json:"major,omitempty"`
	Minor   uint32 `json:"minor,omitempty"`
	Options string `json:"options,omitempty"`
	OK      bool   `json:"ok,omitempty"`
	Error   string `json:"error,omitempty"`
}

// ProbeReport is a complete probe report.
type ProbeReport []ProbeLine

// ParseProbe parses a probe report; it fails when the report is not complete (no "ready" line).
func ParseProbe(b []byte) (ProbeReport, error) {
	var r ProbeReport
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var l ProbeLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return nil, fmt.Errorf("probe report line %q: %w", sc.Text(), err)
		}
		r = append(r, l)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(r) == 0 || r[len(r)-1].Kind != "ready" {
		return nil, fmt.Errorf("probe report incomplete (%d lines, no ready line)", len(r))
	}
	return r, nil
}

// WaitProbe waits up to timeout for the complete probe report in the file at path (the probe's
// PROBE_OUT, seen from the host) and returns it; it fails the test at the deadline.
func WaitProbe(t testing.TB, path string, timeout time.Duration) ProbeReport {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for {
		var b []byte
		if b, err = os.ReadFile(path); err == nil {
			var r ProbeReport
			if r, err = ParseProbe(b); err == nil {
				return r
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("containerdtest: no complete probe report at %s within %v: %v", path, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Env returns the value of the environment variable name, and whether it was set.
func (r ProbeReport) Env(name string) (string, bool) {
	for _, l := range r {
		if l.Kind == "env" && l.Name == name {
			return l.Value, true
		}
	}
	return "", false
}

// Device returns the device node at path in the container.
func (r ProbeReport) Device(path string) (ProbeLine, bool) { return r.find("device", path) }

// Write returns the result of the write to path.
func (r ProbeReport) Write(path string) (ProbeLine, bool) { return r.find("write", path) }

// Mount returns the last mount at path (the one a process sees).
func (r ProbeReport) Mount(path string) (ProbeLine, bool) {
	var m ProbeLine
	ok := false
	for _, l := range r {
		if l.Kind == "mount" && l.Path == path {
			m, ok = l, true
		}
	}
	return m, ok
}

// ReadOnly reports whether a mount's per-mount options include ro.
func (l ProbeLine) ReadOnly() bool {
	for _, o := range strings.Split(l.Options, ",") {
		if o == "ro" {
			return true
		}
	}
	return false
}

func (r ProbeReport) find(kind, path string) (ProbeLine, bool) {
	for _, l := range r {
		if l.Kind == kind && l.Path == path {
			return l, true
		}
	}
	return ProbeLine{}, false
}

// CRILogPayload strips the CRI log prefix ("<time> <stream> <tag> ") from each line of a
// container log as the runtime writes it, leaving what the container printed.
func CRILogPayload(b []byte) []byte {
	var out bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), " ", 4)
		if len(parts) == 4 {
			out.WriteString(parts[3])
			out.WriteByte('\n')
		}
	}
	return out.Bytes()
}
