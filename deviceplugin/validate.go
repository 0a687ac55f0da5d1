package deviceplugin

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/internal/resourcename"
)

// Validate reports every value of c that New refuses, one error per problem, joined with
// errors.Join in the order the fields are declared. Each message starts with "deviceplugin: "
// and names the field and the value, as in
//
//	deviceplugin: ResourceName must be an extended resource name, got "gpu"
//
// and each error matches ErrInvalidConfig (errors.Is). Validate changes nothing and touches
// no files; it resolves relative paths against the working directory only to check the
// socket path lengths. Every zero value except ResourceName's is valid.
func (c Config) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, invalidf(nil, format, args...)) }

	switch {
	case c.ResourceName == "":
		add("ResourceName must be set")
	case !isExtendedResourceName(c.ResourceName):
		add("ResourceName must be an extended resource name, got %q", c.ResourceName)
	}
	pluginDir, err := absPath("PluginDir", c.PluginDir, pluginapi.DevicePluginPath)
	if err != nil {
		errs = append(errs, err)
	}
	socket := c.socketName()
	switch {
	case !isFileName(socket):
		add("SocketName must be a file name, not a path, got %q", socket)
	case pluginDir != "":
		if p := filepath.Join(pluginDir, socket); len(p) > maxSocketPath {
			add("socket path %q (PluginDir + SocketName) must not be longer than %d bytes, got %d", p, maxSocketPath, len(p))
		}
	}
	if err := c.validateKubeletSocket(pluginDir); err != nil {
		errs = append(errs, err)
	}
	for i, d := range c.Devices {
		if d == nil {
			add("Devices[%d] must not be nil", i)
		}
	}
	if err := c.validateRegistration(socket); err != nil {
		errs = append(errs, err)
	}
	if c.RegisterTimeout < 0 {
		add("RegisterTimeout must not be negative, got %v", c.RegisterTimeout)
	}
	if c.RetryBackoff < 0 {
		add("RetryBackoff must not be negative, got %v", c.RetryBackoff)
	}
	switch first, _ := c.retryBackoffs(); {
	case c.MaxRetryBackoff < 0:
		add("MaxRetryBackoff must not be negative, got %v", c.MaxRetryBackoff)
	case c.MaxRetryBackoff > 0 && first > 0 && c.MaxRetryBackoff < first:
		add("MaxRetryBackoff must not be shorter than RetryBackoff (%v), got %v", first, c.MaxRetryBackoff)
	}
	return errors.Join(errs...)
}

// validateKubeletSocket checks that, in RegisterWithKubelet mode, the kubelet socket (default
// pluginDir/kubelet.sock) can be made absolute and fits a unix socket address. pluginDir is
// the absolute plugin directory, or "" when it could not be resolved.
func (c Config) validateKubeletSocket(pluginDir string) error {
	if c.KubeletSocket == "" && pluginDir == "" {
		return nil // the PluginDir error says it all
	}
	sock, err := absPath("KubeletSocket", c.KubeletSocket, filepath.Join(pluginDir, "kubelet.sock"))
	switch {
	case err != nil:
		return err
	case c.Registration == RegisterWithKubelet && len(sock) > maxSocketPath:
		return invalidf(nil, "KubeletSocket %q must not be longer than %d bytes, got %d", sock, maxSocketPath, len(sock))
	}
	return nil
}

// validateRegistration checks the mode and, in PluginWatcher mode, WatcherDir and the length
// of the registration socket's path, socket being the effective SocketName.
func (c Config) validateRegistration(socket string) error {
	switch c.Registration {
	case RegisterWithKubelet, NoRegistration:
		return nil
	case PluginWatcher:
	default:
		return invalidf(nil, "Registration must be RegisterWithKubelet, PluginWatcher or NoRegistration, got %v", c.Registration)
	}
	if c.WatcherDir == "" {
		return invalidf(nil, "WatcherDir must be set in PluginWatcher mode")
	}
	dir, err := absPath("WatcherDir", c.WatcherDir, "")
	if err != nil {
		return err
	}
	if p := filepath.Join(dir, socket); isFileName(socket) && len(p) > maxSocketPath {
		return invalidf(nil, "registration socket path %q (WatcherDir + SocketName) must not be longer than %d bytes, got %d", p, maxSocketPath, len(p))
	}
	return nil
}

// isFileName reports whether name is a plain file name: not empty, ".", ".." or a path.
func isFileName(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.ContainsRune(name, filepath.Separator)
}

// isExtendedResourceName is the kubelet's rule for a device-plugin resource name.
func isExtendedResourceName(name string) bool { return resourcename.IsExtended(name) }

// configError is one value Config.Validate refuses. It matches ErrInvalidConfig and, when
// set, the cause.
type configError struct {
	msg   string
	cause error
}

// invalidf returns a configError whose message is "deviceplugin: " + the formatted text, and
// ": " + cause when cause is not nil.
func invalidf(cause error, format string, args ...any) error {
	return &configError{msg: fmt.Sprintf(format, args...), cause: cause}
}

func (e *configError) Error() string {
	if e.cause != nil {
		return "deviceplugin: " + e.msg + ": " + e.cause.Error()
	}
	return "deviceplugin: " + e.msg
}

func (e *configError) Unwrap() []error {
	if e.cause != nil {
		return []error{ErrInvalidConfig, e.cause}
	}
	return []error{ErrInvalidConfig}
}
