package devicemanager

import (
	"fmt"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// isExtendedResourceName reports whether name is an extended resource name: domain-qualified,
// outside kubernetes.io, not starting with "requests.", and a valid qualified name once
// prefixed with "requests." (the quota form).
func isExtendedResourceName(name string) bool {
	if !strings.Contains(name, "/") || strings.Contains(name, "kubernetes.io/") {
		return false
	}
	if strings.HasPrefix(name, "requests.") {
		return false
	}
	return len(validation.IsQualifiedName("requests."+name)) == 0
}

// pluginSocketPath resolves a Register request's Endpoint inside dir. The kubelet joins and
// cleans the path, which lets "../x" escape the directory; kdm refuses any endpoint that is not
// a plain local path below dir.
func pluginSocketPath(dir, endpoint string) (string, error) {
	if endpoint == "" || !filepath.IsLocal(endpoint) {
		return "", fmt.Errorf("invalid endpoint %q: must name a socket inside %s", endpoint, dir)
	}
	return filepath.Join(dir, endpoint), nil
}
