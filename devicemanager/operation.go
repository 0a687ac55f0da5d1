package devicemanager

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// Operation is the pod lifecycle operation an admission is for: a pod being added, or a
// running pod's in-place resize.
type Operation int

const (
	// AddOperation admits a pod that is being added: what Allocate does.
	AddOperation Operation = iota
	// ResizeOperation admits an in-place resize of a pod whose containers already hold
	// their devices.
	ResizeOperation
)

// String returns the operation's name, "add" or "resize".
func (o Operation) String() string {
	switch o {
	case AddOperation:
		return "add"
	case ResizeOperation:
		return "resize"
	default:
		return fmt.Sprintf("Operation(%d)", int(o))
	}
}

// AllocateFor is Allocate for the given lifecycle operation. AddOperation is Allocate
// exactly. For any other operation, under Policy.SkipAllocationOnResize (the kubelet v1.37,
// and kdm) it returns nil at once and touches nothing: devices are not re-checked, no plugin
// is called, no reuse pool changes. Without it (the kubelet v1.36) the container's allocation
// runs again as for an add, so a resize of a container whose devices have turned unhealthy,
// or whose plugin is away, is refused with Allocate's error. Device requests are immutable
// under a resize, so an admitted container's devices never change either way.
func (m *Manager) AllocateFor(ctx context.Context, pod *v1.Pod, container *v1.Container, op Operation) error {
	if op != AddOperation && m.cfg.Policy.SkipAllocationOnResize {
		m.log.V(4).Info("Skipped device allocation for a lifecycle operation other than add",
			"pod", klog.KObj(pod), "containerName", container.Name, "operation", op)
		return nil
	}
	return m.Allocate(ctx, pod, container)
}
