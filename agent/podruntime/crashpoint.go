package podruntime

import (
	"os"
	"syscall"
	"time"
)

// CrashPointEnv names the environment variable with which the crash tests (e2e) have kdm kill
// itself with SIGKILL at one point of a container's start: CrashAfterCreate (CreateContainer
// returned, StartContainer not called) or CrashAfterStart (StartContainer returned, the
// container's state not recorded). Unset, as it is outside those tests, it changes nothing.
const CrashPointEnv = "KDM_TEST_CRASH_POINT"

// The crash points CrashPointEnv names.
const (
	CrashAfterCreate = "after-create"
	CrashAfterStart  = "after-start"
)

// crashPoint is CrashPointEnv's value, read once.
var crashPoint = os.Getenv(CrashPointEnv)

// crashAt kills the process with SIGKILL if CrashPointEnv names point; it does not return then.
func crashAt(point string) {
	if crashPoint != point {
		return
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	for {
		time.Sleep(time.Hour) // the signal ends the process
	}
}
