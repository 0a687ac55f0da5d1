package conformance

import (
	"context"
	"fmt"
	"net"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/peer"
)

// peerListener wraps the kubelet.sock listener so that every accepted connection names, in its
// RemoteAddr, the process that connected (SO_PEERCRED): a Register call is thereby tied to the
// plugin process that made it, whatever started that process (the suite, or a restart loop
// the suite started).
type peerListener struct {
	net.Listener
}

func (l peerListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return c, nil
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return c, nil
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil || credErr != nil {
		return c, nil
	}
	return peerConn{Conn: c, addr: peerAddr{pid: int(cred.Pid)}}, nil
}

// peerConn is a connection whose RemoteAddr carries the peer's PID.
type peerConn struct {
	net.Conn
	addr peerAddr
}

func (c peerConn) RemoteAddr() net.Addr { return c.addr }

// peerAddr is the address of a unix socket peer: the PID of the process that connected.
type peerAddr struct {
	pid int
}

func (a peerAddr) Network() string { return "unix" }
func (a peerAddr) String() string  { return fmt.Sprintf("pid %d", a.pid) }

// peerPID returns the PID of the process that made the gRPC call in ctx, or 0 if unknown.
func peerPID(ctx context.Context) int {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return 0
	}
	if a, ok := p.Addr.(peerAddr); ok {
		return a.pid
	}
	return 0
}
