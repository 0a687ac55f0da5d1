package main

import (
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
)

// builtinSamples are the demo's default pod manifests: byte-for-byte copies of testdata/pods
// (embed cannot reach outside this directory; TestBuiltinSamplesMatchTestdata keeps them equal),
// so `kdm demo` works from any directory.
//
//go:embed samples/*.yaml
var builtinSamples embed.FS

// sample is one pod manifest of the demo.
type sample struct {
	name string // base name, e.g. training.yaml
	data []byte
}

// loadSamples returns the *.yaml manifests of dir sorted by name, or the built-in ones when dir
// is "". The demo needs at least two: some to admit before the restart, one to add after it.
func loadSamples(dir string) ([]sample, error) {
	var fsys fs.FS = builtinSamples
	from, pattern := "the built-in samples", "samples/*.yaml"
	if dir != "" {
		fsys, from, pattern = os.DirFS(dir), dir, "*.yaml"
	}
	names, err := fs.Glob(fsys, pattern)
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	var out []sample
	for _, n := range names {
		data, err := fs.ReadFile(fsys, n)
		if err != nil {
			return nil, fmt.Errorf("reading sample pod manifest: %w", err)
		}
		out = append(out, sample{name: filepath.Base(n), data: data})
	}
	if len(out) < 2 {
		return nil, fmt.Errorf("need at least two sample pod manifests (*.yaml) in %s, found %d", from, len(out))
	}
	return out, nil
}

// writeInto places the manifest in dir atomically (a hidden temporary file, then a rename), so
// the agent never sees it half-written.
func (s sample) writeInto(dir string) error {
	tmp := filepath.Join(dir, "."+s.name+".tmp")
	if err := os.WriteFile(tmp, s.data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, s.name))
}
