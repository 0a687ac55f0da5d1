package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/kdm-project/kdm/devicemanager"
)

// TestWrite: the plain list is every policy name, each parsable; -kubelets gives each kubelet
// row's name and release, oldest first.
func TestWrite(t *testing.T) {
	var out bytes.Buffer
	if err := write(&out, false); err != nil {
		t.Fatal(err)
	}
	names := strings.Fields(out.String())
	if strings.Join(names, ",") != strings.Join(devicemanager.PolicyNames(), ",") || names[len(names)-1] != "kdm" {
		t.Errorf("policy names %q, want %q", names, devicemanager.PolicyNames())
	}
	for _, n := range names {
		if _, err := devicemanager.ParsePolicy(n); err != nil {
			t.Errorf("printed name %q does not parse: %v", n, err)
		}
	}
	out.Reset()
	if err := write(&out, true); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	versions := devicemanager.KubeletVersions()
	if len(lines) != len(versions) {
		t.Fatalf("-kubelets printed %d lines, want %d: %q", len(lines), len(versions), lines)
	}
	for i, v := range versions {
		if want := v.Name + " " + v.Reference; lines[i] != want {
			t.Errorf("line %d = %q, want %q", i, lines[i], want)
		}
	}
}
