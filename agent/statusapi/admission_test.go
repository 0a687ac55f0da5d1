package statusapi

import (
	"net"
	"testing"
)

// TestIsProbeRequest: only GET or HEAD of a health endpoint or one of its checks, with or
// without a query, is a probe; other paths, methods and malformed request lines are not.
func TestIsProbeRequest(t *testing.T) {
	for req, want := range map[string]bool{
		"GET /healthz HTTP/1.1\r\nHost: kdm\r\n\r\n":             true,
		"HEAD /livez HTTP/1.1\r\n\r\n":                           true,
		"GET /readyz?verbose&exclude=api HTTP/1.1\r\n\r\n":       true,
		"GET /readyz/device-manager HTTP/1.0\r\n\r\n":            true,
		"GET /healthz\n\n":                                       false, // HTTP/0.9 style: no version
		"POST /healthz HTTP/1.1\r\n\r\n":                         false,
		"GET /healthzz HTTP/1.1\r\n\r\n":                         false,
		"GET /status HTTP/1.1\r\n\r\n":                           false,
		"GET /metrics?x=/healthz HTTP/1.1\r\n\r\n":               false,
		"GET http://kdm/healthz HTTP/1.1\r\n\r\n":                false, // absolute form: served as anything else
		"GET  /healthz HTTP/1.1 extra\r\n\r\n":                   false,
		"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n":                       false,
		"\r\n\r\n":                                               false,
		"GET /api/stream HTTP/1.1\r\nX-Path: /healthz\r\n\r\n":   false,
		"GET /livez/ HTTP/1.1\r\nConnection: keep-alive\r\n\r\n": true,
	} {
		if got := isProbeRequest([]byte(req)); got != want {
			t.Errorf("isProbeRequest(%q) = %v, want %v", req, got, want)
		}
	}
}

// TestBusiestOldest: the connection closed to make room is the oldest of the address holding
// the most pending connections, never the newest, and the oldest of all among equals.
func TestBusiestOldest(t *testing.T) {
	conn := func(ip string) *pendingConn { return &pendingConn{peer: net.ParseIP(ip).String()} }
	probe := conn("10.0.0.1")
	flood := []*pendingConn{conn("10.0.0.2"), conn("10.0.0.2"), conn("10.0.0.2")}
	pending := append([]*pendingConn{probe}, flood...)
	if v := busiestOldest(pending); v != flood[0] {
		t.Errorf("victim %+v, want the flood's oldest", v)
	}
	equals := []*pendingConn{conn("10.0.0.3"), conn("10.0.0.4"), conn("10.0.0.5")}
	if v := busiestOldest(equals); v != equals[0] {
		t.Errorf("among equals, victim %+v, want the oldest", v)
	}
	last := []*pendingConn{conn("10.0.0.6"), conn("10.0.0.7"), conn("10.0.0.7")}
	if v := busiestOldest(last); v != last[1] {
		t.Errorf("victim %+v, want the busiest address's oldest, not its newest", v)
	}
}
