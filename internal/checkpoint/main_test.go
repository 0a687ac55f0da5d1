package checkpoint

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The crash test re-executes this test binary as the writer it kills.
	if dir := os.Getenv(crashWriterEnv); dir != "" {
		os.Exit(runCrashWriter(dir))
	}
	goleak.VerifyTestMain(m)
}
