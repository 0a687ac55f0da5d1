// Package testbin builds the project's commands for tests that run them as separate processes.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
)

// Build compiles every package of pkgs, a map from output file name to a package path that
// `go build` accepts from the caller's working directory, into a new temporary directory whose
// name starts with prefix, and returns that directory. Compiler output goes to stderr. On
// success the caller owns the directory and removes it; on failure nothing is left behind and
// the error names the binary that did not build. Packages are built in output-name order.
func Build(prefix string, pkgs map[string]string) (string, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", fmt.Errorf("creating the binary directory: %w", err)
	}
	names := make([]string, 0, len(pkgs))
	for name := range pkgs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, name), pkgs[name])
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			_ = os.RemoveAll(dir)
			return "", fmt.Errorf("building %s from %s: %w", name, pkgs[name], err)
		}
	}
	return dir, nil
}
