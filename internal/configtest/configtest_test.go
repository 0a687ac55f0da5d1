package configtest

import (
	"errors"
	"testing"
)

// recorder is a testing.TB that records a failure instead of stopping the test.
type recorder struct {
	testing.TB
	failed bool
}

func (r *recorder) Helper()               {}
func (r *recorder) Fatalf(string, ...any) { r.failed = true }

func TestCheckError(t *testing.T) {
	for _, tc := range []struct {
		err      error
		want     string
		wantFail bool
	}{
		{nil, "", false},
		{errors.New("x: bad"), "x: bad", false},
		{errors.New("x: bad"), "", true},
		{nil, "x: bad", true},
		{errors.New("x: other"), "x: bad", true},
	} {
		r := &recorder{TB: t}
		CheckError(r, tc.err, tc.want)
		if r.failed != tc.wantFail {
			t.Errorf("CheckError(%v, %q) failed=%v, want %v", tc.err, tc.want, r.failed, tc.wantFail)
		}
	}
}
