package devicemanager

import (
	"time"

	"github.com/kdm-project/kdm/internal/state"
)

// Rules are the policy switches the core's decisions read (see the core's decide.go): the
// manager and the simulator (package explore) both build them with Policy.Rules.
type Rules = state.Rules

// Rules returns the switches of p that the core's decisions read (state.Rules), with grace as
// the stopped-endpoint grace period (zero: DefaultGracePeriod) and a zero
// DeferAdmissionTimeout as DefaultDeferAdmissionTimeout. The manager and the simulator
// (package explore) both take their decisions from it.
func (p Policy) Rules(grace time.Duration) Rules {
	if grace == 0 {
		grace = DefaultGracePeriod
	}
	timeout := p.DeferAdmissionTimeout
	if timeout == 0 {
		timeout = DefaultDeferAdmissionTimeout
	}
	return state.Rules{
		RejectSameSocketRegistration: p.RejectSameSocketRegistration,
		PromoteLiveInstance:          p.PromoteLiveInstance,
		DeferAdmission:               p.DeferAdmission,
		DeferAdmissionTimeout:        timeout,
		GracePeriod:                  grace,
	}
}
