// Command probe is the program of the containerdtest images. It reports what a container sees,
// as JSON lines on stdout (the container log) and, when PROBE_OUT names a file, in that file:
// its environment, every device node under /dev with its major and minor numbers, its mounts,
// and for each path in PROBE_WRITE (comma-separated) whether a write succeeded; then a line of
// kind "ready". It then exits with PROBE_EXIT when that is set (after PROBE_EXIT_AFTER, a Go
// duration, when that is set too), else waits for SIGTERM or SIGINT and exits 0 (after
// PROBE_TERM_DELAY, a Go duration, when that is set: a container slow to stop), so the same
// binary serves as a pod sandbox (pause) image.
//
// It has no dependencies beyond the standard library, so that its image stays small.
package main

import (
	"bufio"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// line is one report line; internal/containerdtest.ProbeLine reads it.
type line struct {
	Kind    string `json:"kind"` // env, device, mount, write, ready
	Name    string `json:"name,omitempty"`
	Value   string `json:"value,omitempty"`
	Path    string `json:"path,omitempty"`
	Type    string `json:"type,omitempty"` // device: "c" or "b"
	Major   uint32 `json:"major,omitempty"`
	Minor   uint32 `json:"minor,omitempty"`
	Options string `json:"options,omitempty"` // mount: the per-mount options (ro or rw first)
	OK      bool   `json:"ok,omitempty"`
	Error   string `json:"error,omitempty"`
}

func main() {
	// Handle the signals before anything else: as a sandbox the probe is its namespace's init,
	// which the kernel sends no signal it has no handler for.
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)

	var out io.Writer = os.Stdout
	var file *os.File
	if p := os.Getenv("PROBE_OUT"); p != "" {
		f, err := os.Create(p)
		if err != nil {
			os.Stderr.WriteString("probe: " + err.Error() + "\n")
		} else {
			file = f
			out = io.MultiWriter(os.Stdout, f)
		}
	}
	w := bufio.NewWriter(out)
	enc := json.NewEncoder(w)
	emit := func(l line) { _ = enc.Encode(l) }

	env := os.Environ()
	sort.Strings(env)
	for _, kv := range env {
		name, value, _ := strings.Cut(kv, "=")
		emit(line{Kind: "env", Name: name, Value: value})
	}
	for _, l := range devices() {
		emit(l)
	}
	for _, l := range mounts() {
		emit(l)
	}
	if list := os.Getenv("PROBE_WRITE"); list != "" {
		for _, p := range strings.Split(list, ",") {
			emit(write(p))
		}
	}
	emit(line{Kind: "ready"})
	_ = w.Flush()
	if file != nil {
		_ = file.Sync()
		_ = file.Close()
	}

	if s := os.Getenv("PROBE_EXIT"); s != "" {
		if d, err := time.ParseDuration(os.Getenv("PROBE_EXIT_AFTER")); err == nil {
			time.Sleep(d)
		}
		code, err := strconv.Atoi(s)
		if err != nil {
			os.Stderr.WriteString("probe: PROBE_EXIT: " + err.Error() + "\n")
			os.Exit(2)
		}
		os.Exit(code)
	}
	<-stop
	if d, err := time.ParseDuration(os.Getenv("PROBE_TERM_DELAY")); err == nil {
		time.Sleep(d)
	}
}

// devices lists the character and block devices under /dev.
func devices() []line {
	var ls []line
	_ = filepath.WalkDir("/dev", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeDevice == 0 {
			return nil
		}
		var st syscall.Stat_t
		if syscall.Stat(p, &st) != nil {
			return nil
		}
		typ := "b"
		if d.Type()&fs.ModeCharDevice != 0 {
			typ = "c"
		}
		dev := uint64(st.Rdev)
		major := uint32((dev>>8)&0xfff | (dev>>32)&^0xfff)
		minor := uint32(dev&0xff | (dev>>12)&^0xff)
		ls = append(ls, line{Kind: "device", Path: p, Type: typ, Major: major, Minor: minor})
		return nil
	})
	return ls
}

// mounts lists the mount points of /proc/self/mountinfo with their per-mount options.
func mounts() []line {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return []line{{Kind: "mount", Error: err.Error()}}
	}
	var ls []line
	for _, l := range strings.Split(string(b), "\n") {
		// id parent major:minor root mountpoint options ...
		f := strings.Fields(l)
		if len(f) < 6 {
			continue
		}
		ls = append(ls, line{Kind: "mount", Path: f[4], Options: f[5]})
	}
	return ls
}

// write tries to write one byte to p (opened for writing, never created or truncated).
func write(p string) line {
	l := line{Kind: "write", Path: p}
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err == nil {
		_, err = f.Write([]byte{0})
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		l.Error = err.Error()
	} else {
		l.OK = true
	}
	return l
}
