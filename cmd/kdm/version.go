package main

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strconv"

	"github.com/kdm-project/kdm/agent"
)

// The build's version and commit, stamped at link time by `make build`, `make release` and
// `make install`: -ldflags "-X main.version=0.1.0 -X main.commit=0123abcd4567". The Makefile
// takes the version from `git describe --tags` or else the VERSION file, and the commit from
// git or else "unknown", so a build from a tarball is stamped too. A plain `go build` leaves
// them empty; currentVersion then falls back to what Go recorded.
var (
	version string
	commit  string
)

// versionInfo is what `kdm version -o json` and `kdm run --version=raw` print.
type versionInfo struct {
	// BuildVersion is kdm's own version (main.version), "unknown" when not stamped.
	BuildVersion string `json:"buildVersion"`
	// Commit is the commit it was built from (main.commit, else the VCS revision Go
	// recorded), "unknown" when neither says.
	Commit string `json:"commit"`
	// Version is agent.ReportedVersion(), the version the Node reports as its kubelet version; set it
	// at link time with -ldflags "-X github.com/kdm-project/kdm/agent.Version=...".
	Version string `json:"version"`
	// Module is the module version Go recorded in the binary ("(devel)" from a checkout).
	Module    string `json:"module,omitempty"`
	Revision  string `json:"revision,omitempty"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

// currentVersion describes the running binary.
func currentVersion() versionInfo {
	v := versionInfo{BuildVersion: version, Commit: commit, Version: agent.ReportedVersion(),
		GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		v.Module = bi.Main.Version
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				v.Revision = s.Value
			}
		}
	}
	if v.BuildVersion == "" {
		v.BuildVersion = "unknown"
		if v.Module != "" && v.Module != "(devel)" {
			v.BuildVersion = v.Module
		}
	}
	if v.Commit == "" {
		v.Commit = "unknown"
		if v.Revision != "" {
			v.Commit = v.Revision
		}
	}
	return v
}

// runVersion is `kdm version`: the version on one line, or with -o json the whole record.
func runVersion(args []string, stdout, stderr io.Writer) int {
	c := newCommand("kdm version", "kdm version [-o text|json]",
		"Prints this kdm binary's version and commit, and the kubelet version its Node reports; -o json\nadds the module version, VCS revision, Go version and platform.", stdout, stderr)
	output := c.flags.StringP("output", "o", "text", "output format: text or json")
	if code, ok := c.parse(args); !ok {
		return code
	}
	if c.flags.NArg() > 0 {
		return c.misuse("expected no arguments, got %d: %s", c.flags.NArg(), quoteArgs(c.flags.Args()))
	}
	v := versionValue("true")
	switch *output {
	case "text":
	case "json":
		v = "raw"
	default:
		return c.misuse("--output %q: want text or json", *output)
	}
	if _, err := v.print(stdout); err != nil {
		return c.fail("%v", err)
	}
	return exitOK
}

// versionValue is the --version flag, as the kubelet has it: --version (or --version=true)
// prints "kdm <version> (commit <commit>, kubelet <agent.ReportedVersion()>)", --version=raw the whole record as JSON, --version=false nothing.
type versionValue string

func (v *versionValue) String() string { return string(*v) }
func (v *versionValue) Type() string   { return "version" }

// Set accepts a boolean or "raw".
func (v *versionValue) Set(s string) error {
	if s == "raw" {
		*v = "raw"
		return nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("want true, false or raw: %w", err)
	}
	if b {
		*v = "true"
	} else {
		*v = ""
	}
	return nil
}

// print writes the version as asked; it reports whether anything was asked for.
func (v versionValue) print(w io.Writer) (bool, error) {
	info := currentVersion()
	switch v {
	case "":
		return false, nil
	case "raw":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return true, enc.Encode(info)
	default:
		_, err := fmt.Fprintf(w, "kdm %s (commit %s, kubelet %s)\n", info.BuildVersion, info.Commit, info.Version)
		return true, err
	}
}
