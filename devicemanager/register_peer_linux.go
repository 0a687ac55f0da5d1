package devicemanager

import (
	"net"

	"golang.org/x/sys/unix"
)

// peerPID returns the PID of the process at the other end of a unix socket connection
// (SO_PEERCRED: the process that connected), or 0 if it cannot be read.
func peerPID(conn net.Conn) int32 {
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return 0
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0
	}
	var pid int32
	_ = raw.Control(func(fd uintptr) {
		if cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
			pid = cred.Pid
		}
	})
	return pid
}
