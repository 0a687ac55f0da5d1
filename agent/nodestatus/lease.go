package nodestatus

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// renewLease creates or renews the node's Lease in kube-node-lease, owned by the Node. It is
// kdm's own rather than component-helpers' lease controller so that renewals follow the
// publisher's clock and its status loop.
func (p *Publisher) renewLease(ctx context.Context) error {
	leases := p.cfg.Client.CoordinationV1().Leases(LeaseNamespace)
	now := metav1.NewMicroTime(p.clock.Now())
	lease, err := leases.Get(ctx, p.cfg.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		node, err := p.cfg.Client.CoreV1().Nodes().Get(ctx, p.cfg.NodeName, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("getting node for its lease: %w", err)
		}
		lease = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{
				Name:      p.cfg.NodeName,
				Namespace: LeaseNamespace,
				OwnerReferences: []metav1.OwnerReference{{
					APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID,
				}},
			},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To(p.cfg.NodeName),
				LeaseDurationSeconds: ptr.To(int32(p.cfg.LeaseDuration / time.Second)),
				RenewTime:            &now,
			},
		}
		if _, err := leases.Create(ctx, lease, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating lease: %w", err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("getting lease: %w", err)
	}
	lease.Spec.RenewTime = &now
	lease.Spec.HolderIdentity = ptr.To(p.cfg.NodeName)
	if _, err := leases.Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("renewing lease: %w", err)
	}
	return nil
}
