package sockdir

import (
	"net"
	"os"
	"path/filepath"
	"testing"
)

// TestNewHoldsASocketAndGoes: the directory takes a socket whatever the test's name, and is
// gone after the test.
func TestNewHoldsASocketAndGoes(t *testing.T) {
	var dir string
	t.Run("a subtest with a name long enough that t.TempDir() would not hold a unix socket path", func(t *testing.T) {
		dir = New(t)
		lis, err := net.Listen("unix", filepath.Join(dir, "device-plugin-with-a-long-name.sock"))
		if err != nil {
			t.Fatalf("listening in %s: %v", dir, err)
		}
		_ = lis.Close()
	})
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("%s still exists after its test ended (stat: %v)", dir, err)
	}
}
