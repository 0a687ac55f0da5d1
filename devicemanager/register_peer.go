package devicemanager

import (
	"context"
	"net"
	"sync/atomic"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// registrant is who sends a Register call: the principal (user and control group) and the
// process at the other end of the kubelet.sock connection, as SO_PEERCRED and
// /proc/<pid>/cgroup name them on Linux (zero where unknown), and the connection itself. The
// in-flight limiter cancels the calls of the busiest principal first, then of its busiest
// process and connection (registerLimiter.victimLocked), so that a flood from many processes
// of one user or container cannot push out another's registration.
type registrant struct {
	principal principal
	pid       int32
	conn      uint64 // unique per accepted connection; 0 when the call carries no registrant
}

// principal is the user and the control group of a registrant's process: what a node
// isolates workloads by (a pod's containers run in the pod's cgroup; a service in its own).
// A flood from many processes, or many connections, of one principal counts as one.
type principal struct {
	uid    uint32
	cgroup string // the process's /proc/<pid>/cgroup, bounded; "" where unknown
}

// registrantCredentials are kubelet.sock's transport credentials. Like the kubelet's plain
// listener they add no security and nothing on the wire: ServerHandshake returns the
// connection untouched, with an AuthInfo naming the registrant, which gRPC hands to every
// call on the connection (registrantOf).
type registrantCredentials struct {
	conns *atomic.Uint64 // the last connection number given out
}

func newRegistrantCredentials() credentials.TransportCredentials {
	return registrantCredentials{conns: new(atomic.Uint64)}
}

// registrantInfo is the AuthInfo of a kubelet.sock connection.
type registrantInfo struct {
	credentials.CommonAuthInfo
	registrant registrant
}

// AuthType is "insecure", as for gRPC's insecure credentials: nothing is authenticated.
func (registrantInfo) AuthType() string { return "insecure" }

func (c registrantCredentials) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	info := registrantInfo{
		CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity},
		registrant:     peerRegistrant(conn, c.conns.Add(1)),
	}
	return conn, info, nil
}

// ClientHandshake is not used: kubelet.sock only serves. It adds nothing, as on the server.
func (registrantCredentials) ClientHandshake(_ context.Context, _ string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return conn, registrantInfo{CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity}}, nil
}

func (registrantCredentials) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "insecure"}
}

func (c registrantCredentials) Clone() credentials.TransportCredentials { return c }

func (registrantCredentials) OverrideServerName(string) error { return nil }

// registrantOf returns the registrant of the gRPC call ctx belongs to; the zero registrant if
// the server does not use registrantCredentials.
func registrantOf(ctx context.Context) registrant {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return registrant{}
	}
	info, ok := p.AuthInfo.(registrantInfo)
	if !ok {
		return registrant{}
	}
	return info.registrant
}
