// Package sockdir gives tests a directory for unix sockets. A socket's path is limited to 107
// bytes, and t.TempDir() (which embeds the test's name) can be longer, so tests that listen on
// sockets take their directory from here instead. Only tests import it.
package sockdir

import (
	"os"
	"testing"
)

// New returns a fresh directory with a short path under the system's temporary directory,
// removed when the test ends. It fails the test if the directory cannot be made.
func New(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "kdm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}
