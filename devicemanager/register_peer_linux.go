package devicemanager

import (
	"fmt"
	"io"
	"net"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// maxCgroupBytes bounds what is read of a process's /proc/<pid>/cgroup.
const maxCgroupBytes = 4096

// peerRegistrant returns the registrant at the other end of a unix socket connection
// (SO_PEERCRED: the process that connected, its user, and that process's control group),
// numbered conn. What cannot be read stays zero.
func peerRegistrant(conn net.Conn, id uint64) registrant {
	r := registrant{conn: id}
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return r
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return r
	}
	_ = raw.Control(func(fd uintptr) {
		if cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
			r.pid, r.principal.uid = cred.Pid, cred.Uid
		}
	})
	if r.pid > 0 {
		r.principal.cgroup = cgroupOf(r.pid)
	}
	return r
}

// cgroupOf returns the control group lines of process pid ("" if they cannot be read): on a
// cgroup v2 host the one "0::/path" line, on a v1 or hybrid host every hierarchy's line.
func cgroupOf(pid int32) string {
	f, err := os.Open(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return ""
	}
	defer func() { _ = f.Close() }()
	b, _ := io.ReadAll(io.LimitReader(f, maxCgroupBytes))
	return strings.TrimSpace(string(b))
}
