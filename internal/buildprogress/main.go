// Command buildprogress runs a `go build` and says how far it is: the Makefile's long first
// builds (`make demo`, `make demo-runtime`) run through it, so that a cold build cache, which
// compiles the Kubernetes libraries first, shows what is being built instead of minutes of
// silence.
//
//	go run ./internal/buildprogress -- go build -o bin/kdm ./cmd/kdm
//
// It counts the packages the build depends on (`go list -deps`), runs the build with -v (which
// names each package as it compiles it) and prints a line every 25 packages or 10 seconds:
// how many of at most how many, and the last one. A warm cache compiles nothing and prints one
// line. The build's own errors pass through; the exit code is the build's.
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

func main() {
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) < 2 || args[1] != "build" {
		fmt.Fprintln(os.Stderr, "usage: buildprogress -- go build [build flags] packages...")
		os.Exit(2)
	}
	os.Exit(run(args, os.Stdout, os.Stderr))
}

// run runs the build command args (args[0] the go command, args[1] "build") with -v.
func run(args []string, stdout, stderr io.Writer) int {
	pkgs := packages(args[2:])
	total := countDeps(args[0], pkgs)
	what := strings.Join(pkgs, " ")
	if total > 0 {
		fmt.Fprintf(stdout, "building %s: %d packages with their dependencies; a cold build cache compiles them all (minutes), a warm one none\n", what, total)
	} else {
		fmt.Fprintf(stdout, "building %s\n", what)
	}
	cmd := exec.Command(args[0], append([]string{"build", "-v"}, args[2:]...)...)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = stdout, pw
	start := time.Now()
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "buildprogress: %v\n", err)
		return 1
	}
	var (
		mu       sync.Mutex
		n        int
		last     string
		reported time.Time
	)
	report := func() {
		of := ""
		if total > 0 {
			of = fmt.Sprintf(" of at most %d", total)
		}
		fmt.Fprintf(stdout, "  %s: %d%s packages compiled, last %s\n", time.Since(start).Round(time.Second), n, of, last)
		reported = time.Now()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			l := sc.Text()
			mu.Lock()
			if isPackagePath(l) {
				n++
				last = l
				if n%25 == 0 || time.Since(reported) > 10*time.Second {
					report()
				}
			} else {
				fmt.Fprintln(stderr, l) // a compiler error or warning
			}
			mu.Unlock()
		}
	}()
	err := cmd.Wait()
	pw.Close()
	<-done
	if err != nil {
		fmt.Fprintf(stderr, "buildprogress: %s: %v\n", strings.Join(args, " "), err)
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		return 1
	}
	if n == 0 {
		fmt.Fprintf(stdout, "  up to date (%s)\n", time.Since(start).Round(time.Millisecond))
	} else {
		fmt.Fprintf(stdout, "  built: %d packages compiled in %s\n", n, time.Since(start).Round(time.Second))
	}
	return 0
}

// packages are the package arguments of a build command line: what follows the flags. Flags
// that take a separate value are the ones the Makefile uses.
func packages(args []string) []string {
	var pkgs []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-o" || a == "-ldflags" || a == "-tags" || a == "-gcflags":
			i++
		case strings.HasPrefix(a, "-"):
		default:
			pkgs = append(pkgs, a)
		}
	}
	return pkgs
}

// countDeps is how many packages pkgs depend on, themselves included; 0 when go list fails.
func countDeps(goCmd string, pkgs []string) int {
	out, err := exec.Command(goCmd, append([]string{"list", "-deps"}, pkgs...)...).Output()
	if err != nil {
		return 0
	}
	return strings.Count(string(out), "\n")
}

// isPackagePath reports whether a line of go build -v's output names a package: one word, no
// spaces, no colon (errors are "file:line: ...").
func isPackagePath(l string) bool {
	return l != "" && !strings.ContainsAny(l, " \t:") && !strings.HasPrefix(l, "#")
}
