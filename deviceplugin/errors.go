package deviceplugin

import "errors"

// Sentinel errors. Errors returned by this package wrap one of these where a caller may want
// to branch on the cause; the wrapping message carries the detail (field, path, device ID).
var (
	// ErrInvalidConfig is matched (errors.Is) by every error Config.Validate and New return;
	// the message names the field.
	ErrInvalidConfig = errors.New("invalid device plugin config")
	// ErrAlreadyStarted is returned by a second Start.
	ErrAlreadyStarted = errors.New("device plugin already started")
	// ErrStopped is returned by Start after Stop (a Plugin is single-use) and wrapped when Stop
	// ends a Start that is still registering.
	ErrStopped = errors.New("device plugin stopped")
	// ErrRegistration is wrapped, together with the gRPC error, when a Register call to the
	// kubelet fails. The gRPC status survives the wrapping (status.Code and status.FromError
	// still see it).
	ErrRegistration = errors.New("device plugin registration failed")
	// ErrUnknownDevice is wrapped by SetHealth for an ID that is not in the device list.
	ErrUnknownDevice = errors.New("unknown device")
	// ErrSocketInUse is wrapped by Start when a process accepts connections on the socket
	// path (another plugin, or a second copy of this one): the plugin refuses to start and
	// leaves that socket alone.
	ErrSocketInUse = errors.New("device plugin socket in use")
	// ErrNotSocket is wrapped by Start when the socket path holds a file that is not a
	// socket: the plugin never deletes such a file.
	ErrNotSocket = errors.New("device plugin socket path holds another kind of file")
)
