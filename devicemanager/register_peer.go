package devicemanager

import (
	"context"
	"net"
	"sync/atomic"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// registrant is who sends a Register call: the process at the other end of the kubelet.sock
// connection (its PID from SO_PEERCRED on Linux, 0 where unknown) and the connection itself.
// The in-flight limiter cancels the calls of the busiest registrant first, so that one
// process's flood cannot push out another's registration.
type registrant struct {
	pid  int32
	conn uint64 // unique per accepted connection; 0 when the call carries no registrant
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
		registrant:     registrant{pid: peerPID(conn), conn: c.conns.Add(1)},
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
