package scenario

import (
	"errors"
	"fmt"

	"github.com/go-logr/logr"

	"github.com/kdm-project/kdm/devicemanager"
)

// Config describes a Runner. Every field's zero value means the default documented on it; New
// rejects invalid values with Validate's error.
type Config struct {
	// Policy names the device manager policy as devicemanager.ParsePolicy takes it:
	// "kubelet-1.36" (alias "kubelet") or "kdm". Empty means "kubelet-1.36".
	Policy string

	// ScriptDir resolves relative file arguments (checkpoint legacy-v1 FILE). Empty means the
	// process's working directory.
	ScriptDir string

	// Logger receives the logs of the manager and the plugins the runner drives. The zero
	// Logger discards them.
	Logger logr.Logger
}

// Validate reports every invalid value in c, joined with errors.Join in the order the fields
// are declared; today that is an unknown Policy. It changes nothing.
func (c Config) Validate() error {
	var errs []error
	if _, err := c.policy(); err != nil {
		errs = append(errs, fmt.Errorf("scenario: %w", err))
	}
	return errors.Join(errs...)
}

// policy returns the policy c.Policy names, the kubelet v1.36's for an empty name (the
// stories' recorded outcomes were first written under it).
func (c Config) policy() (devicemanager.Policy, error) {
	if c.Policy == "" {
		return devicemanager.Kubelet136Policy(), nil
	}
	return devicemanager.ParsePolicy(c.Policy)
}
