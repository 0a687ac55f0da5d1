package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the output")

// TestCommandLine: --help and -h print the usage to stdout and exit 0; a bad command line says
// what was wrong on stderr and exits 2, before any plugin starts. The outputs are golden.
func TestCommandLine(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stream string // "stdout" or "stderr": where the golden text goes; the other stays empty
	}{
		{"help", []string{"--help"}, 0, "stdout"},
		{"help", []string{"-h"}, 0, "stdout"},
		{"unknown-flag", []string{"--bogus"}, 2, "stderr"},
		{"single-dash-long-flag", []string{"-mock", "dgxa100"}, 2, "stderr"},
		{"arguments", []string{"--mock", "dgxa100", "a", "b"}, 2, "stderr"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(tc.args, &stdout, &stderr); code != tc.code {
				t.Fatalf("kdm-nvml-plugin %q: exit %d, want %d; stderr %q", tc.args, code, tc.code, stderr.String())
			}
			got, other := stdout.String(), stderr.String()
			if tc.stream == "stderr" {
				got, other = other, got
			}
			if other != "" {
				t.Errorf("kdm-nvml-plugin %q also wrote to the other stream: %q", tc.args, other)
			}
			golden := filepath.Join("testdata", tc.name+".golden")
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (go test -run TestCommandLine -update writes it)", err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("kdm-nvml-plugin %q (-want +got; -update rewrites):\n%s", tc.args, diff)
			}
		})
	}
}
