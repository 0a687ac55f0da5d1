// Package configtest holds the one assertion every Config's table test makes: Validate's
// error is exactly the message the case expects, or nil when it expects none.
package configtest

import "testing"

// CheckError fails the test unless err's message is want, or err is nil when want is empty.
func CheckError(tb testing.TB, err error, want string) {
	tb.Helper()
	if want == "" {
		if err != nil {
			tb.Fatalf("Validate() = %v, want nil", err)
		}
		return
	}
	if err == nil || err.Error() != want {
		tb.Fatalf("Validate() = %v, want %q", err, want)
	}
}
