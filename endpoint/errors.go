package endpoint

import (
	"errors"
	"fmt"
)

// ErrStopped is the errors.Is target for every call refused because the endpoint is stopped.
// The error actually returned names the resource, in the kubelet's words:
// "endpoint <resourceName> has been stopped".
var ErrStopped = errors.New("endpoint has been stopped")

// stoppedError is the concrete error behind ErrStopped; it carries the resource name.
type stoppedError struct {
	resourceName string
}

func (e *stoppedError) Error() string {
	// The kubelet's errEndpointStopped is "endpoint %v has been stopped".
	return fmt.Sprintf("endpoint %v has been stopped", e.resourceName)
}

// Is makes errors.Is(err, ErrStopped) true.
func (e *stoppedError) Is(target error) bool { return target == ErrStopped }

func (e *Endpoint) errStopped() error { return &stoppedError{resourceName: e.resourceName} }
