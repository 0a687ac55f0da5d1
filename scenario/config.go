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
	// Policy names the device manager policy as devicemanager.ParsePolicy takes it: a
	// kubelet minor (a name devicemanager.KubeletVersions lists, alias "kubelet" for the
	// newest) or "kdm". Empty means DefaultPolicy.
	Policy string

	// ScriptDir resolves relative file arguments (checkpoint legacy-v1 FILE). Empty means the
	// process's working directory.
	ScriptDir string

	// Records makes the runner keep the embedder's own copy of each pod's assignments, taken
	// when the pod is admitted (Manager.GetContainerAllocations), and hand them to every
	// restart as Sources.RecoveredAllocations, as kdm's agent does. Off, as the kubelet: a
	// lost checkpoint loses the assignments.
	Records bool

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

// DefaultPolicy is the policy a runner uses when Config.Policy is empty: the zero Policy's
// kubelet (devicemanager.BaselinePolicyName), under which the stories' recorded outcomes were
// first written. It stays so when a kubelet is added, older or newer, so that a script means
// the same run whatever kdm supports; `kdm run` defaults to the newest kubelet instead.
var DefaultPolicy = devicemanager.BaselinePolicyName()

// policy returns the policy c.Policy names, DefaultPolicy's for an empty name.
func (c Config) policy() (devicemanager.Policy, error) {
	if c.Policy == "" {
		return devicemanager.ParsePolicy(DefaultPolicy)
	}
	return devicemanager.ParsePolicy(c.Policy)
}
