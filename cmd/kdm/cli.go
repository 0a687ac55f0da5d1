package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"
)

// The command line's one style, shared by every subcommand:
//
//   - flags are pflag's: --long-name VALUE or --long-name=VALUE, a few with a one-letter -x;
//   - --help (or -h) prints the usage to stdout and exits 0;
//   - a bad command line prints "kdm <command>: <what was wrong>" and a pointer to --help
//     to stderr and exits 2; other failures exit 1.

// Exit codes of every subcommand.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// command is one subcommand's command line: its flag set and the text around the flags in
// its usage.
type command struct {
	name     string // "kdm inspect"
	synopsis string // what follows "usage: ", e.g. "kdm inspect [flags] FILE"
	about    string // paragraphs between the synopsis and the flags; may be empty
	// more, if set, prints text after the flags, such as conformance's list of checks.
	more   func(io.Writer)
	flags  *pflag.FlagSet
	stdout io.Writer
	stderr io.Writer
}

// newCommand returns a command with an empty flag set; flags are listed in the order they are
// defined.
func newCommand(name, synopsis, about string, stdout, stderr io.Writer) *command {
	c := &command{name: name, synopsis: synopsis, about: about, stdout: stdout, stderr: stderr}
	c.flags = pflag.NewFlagSet(name, pflag.ContinueOnError)
	c.flags.SortFlags = false
	// pflag prints nothing for ContinueOnError but the usage and deprecation notices; the
	// usage is asked for, so it goes to stdout.
	c.flags.SetOutput(stdout)
	c.flags.Usage = func() { c.printUsage(stdout) }
	return c
}

// printUsage writes the synopsis, the description, the flags and any further text.
func (c *command) printUsage(w io.Writer) {
	fmt.Fprintf(w, "usage: %s\n", c.synopsis)
	if c.about != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimRight(c.about, "\n"))
	}
	if c.flags.HasAvailableFlags() {
		fmt.Fprintf(w, "\nflags:\n%s", c.flags.FlagUsages())
	}
	if c.more != nil {
		fmt.Fprintln(w)
		c.more(w)
	}
}

// parse parses args. When the command should go no further it returns false and the exit
// code: exitOK after --help (the usage is on stdout), exitUsage for a bad flag (the error is
// on stderr).
func (c *command) parse(args []string) (int, bool) {
	err := c.flags.Parse(args)
	switch {
	case err == nil:
		return exitOK, true
	case errors.Is(err, pflag.ErrHelp):
		return exitOK, false
	default:
		if hint := dashHint(c.flags, args); hint != "" {
			return c.misuse("%v (%s)", err, hint), false
		}
		return c.misuse("%v", err), false
	}
}

// dashHint explains a long flag given with one dash, as Go's flag package takes it
// ("-json"): pflag reads that as the one-letter flags j, s, o and n.
func dashHint(fs *pflag.FlagSet, args []string) string {
	for _, a := range args {
		if a == "--" {
			break
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "-"), "=")
		if strings.HasPrefix(a, "-") && !strings.HasPrefix(a, "--") && len(name) > 1 && fs.Lookup(name) != nil {
			return "long flags take two dashes: --" + name
		}
	}
	return ""
}

// misuse reports a bad command line on stderr, "kdm inspect: <what was wrong>" and where
// the usage is, and returns exitUsage.
func (c *command) misuse(format string, args ...any) int {
	fmt.Fprintf(c.stderr, "%s: %s\nRun '%s --help' for usage.\n", c.name, fmt.Sprintf(format, args...), c.name)
	return exitUsage
}

// fail reports a failure that is not the command line's fault on stderr and returns
// exitFailure.
func (c *command) fail(format string, args ...any) int {
	fmt.Fprintf(c.stderr, "%s: %s\n", c.name, fmt.Sprintf(format, args...))
	return exitFailure
}

// quoteArgs lists command-line arguments for an error message: "A" "B".
func quoteArgs(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = fmt.Sprintf("%q", a)
	}
	return strings.Join(q, " ")
}
