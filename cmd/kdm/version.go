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

// versionInfo is what `kdm run --version=raw` prints, as JSON.
type versionInfo struct {
	// Version is agent.ReportedVersion, the version the Node reports as its kubelet version;
	// set it at link time with -ldflags "-X github.com/kdm-project/kdm/agent.Version=...".
	Version string `json:"version"`
	// Module is the module version Go recorded in the binary ("(devel)" from a checkout).
	Module    string `json:"module,omitempty"`
	Revision  string `json:"revision,omitempty"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

// currentVersion describes the running binary.
func currentVersion() versionInfo {
	v := versionInfo{Version: agent.ReportedVersion(), GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		v.Module = bi.Main.Version
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				v.Revision = s.Value
			}
		}
	}
	return v
}

// runVersion is `kdm version`: the version on one line, or with -o json the whole record.
func runVersion(args []string, stdout, stderr io.Writer) int {
	c := newCommand("kdm version", "kdm version [-o text|json]",
		"Prints the version of this kdm binary (the kubelet version its Node reports); -o json adds the\nmodule version, VCS revision, Go version and platform.", stdout, stderr)
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
// prints "kdm <version>", --version=raw the whole record as JSON, --version=false nothing.
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
		_, err := fmt.Fprintf(w, "kdm %s\n", info.Version)
		return true, err
	}
}
