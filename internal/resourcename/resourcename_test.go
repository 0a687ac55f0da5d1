package resourcename

import (
	"strings"
	"testing"
)

func TestIsExtended(t *testing.T) {
	for name, want := range map[string]bool{
		"nvidia.com/gpu":                        true,
		"example.com/a-b.c_d":                   true,
		"squat.ai/fake":                         true,
		"gpu":                                   false, // not domain-qualified
		"cpu":                                   false,
		"kubernetes.io/gpu":                     false, // native
		"example.kubernetes.io/gpu":             false, // native, in a kubernetes.io subdomain
		"requests.nvidia.com/gpu":               false, // a quota name
		"nvidia.com/":                           false, // no name after the domain
		"/gpu":                                  false,
		"nvidia.com/gpu/extra":                  false, // two slashes
		"Nvidia.COM/gpu":                        false, // the domain must be a lowercase DNS subdomain
		"nvidia.com/" + strings.Repeat("g", 63): true,
		"nvidia.com/" + strings.Repeat("g", 64): false, // name part too long
		"nvidia.com/-gpu":                       false,
		"nvidia.com/gpu-":                       false,
		"nvidia com/gpu":                        false,
		"":                                      false,
	} {
		if got := IsExtended(name); got != want {
			t.Errorf("IsExtended(%q) = %v, want %v", name, got, want)
		}
	}
}

// FuzzIsExtended: the rule never panics, and what it accepts has exactly one "/" and no
// kubernetes.io domain.
func FuzzIsExtended(f *testing.F) {
	for _, s := range []string{"nvidia.com/gpu", "kubernetes.io/x", "requests.a/b", "a/b/c", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if IsExtended(name) && (strings.Count(name, "/") != 1 || strings.Contains(name, "kubernetes.io/")) {
			t.Fatalf("IsExtended(%q) = true", name)
		}
	})
}
