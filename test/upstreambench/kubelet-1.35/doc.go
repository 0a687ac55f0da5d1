//go:build olderkubelet

// Package minor imports package olderkubelet so that this module's go.mod and go.sum keep
// what it needs; go.mod's replaces pin the kubelet release it is built against.
package minor

import _ "github.com/kdm-project/kdm/test/upstreambench/olderkubelet"
