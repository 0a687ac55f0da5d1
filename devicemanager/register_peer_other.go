//go:build !linux

package devicemanager

import "net"

// peerRegistrant returns the registrant numbered id with no principal nor process: they are
// read on Linux only. Calls are then told apart by their connection alone.
func peerRegistrant(_ net.Conn, id uint64) registrant { return registrant{conn: id} }
