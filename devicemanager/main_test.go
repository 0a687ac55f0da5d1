package devicemanager

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// BenchmarkLargePlugin re-executes this test binary as its plugin.
	if dir := os.Getenv(largePluginEnv); dir != "" {
		os.Exit(serveLargePlugin(dir))
	}
	goleak.VerifyTestMain(m)
}
