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
// publisher's clock and its status loop. A renewal updates the Lease as the last call wrote
// it, one request, as the kubelet's lease controller does; only the first renewal and one
// after a failure read it first.
func (p *Publisher) renewLease(ctx context.Context) error {
	if p.lease == nil {
		created, err := p.readLease(ctx)
		if err != nil || created {
			return err
		}
	}
	lease := p.lease.DeepCopy()
	now := metav1.NewMicroTime(p.clock.Now())
	lease.Spec.RenewTime = &now
	lease.Spec.HolderIdentity = ptr.To(p.cfg.NodeName)
	written, err := p.cfg.Client.CoordinationV1().Leases(LeaseNamespace).Update(ctx, lease, metav1.UpdateOptions{})
	if err != nil {
		p.lease = nil
		return fmt.Errorf("renewing lease: %w", err)
	}
	p.lease = written
	return nil
}

// readLease reads the node's Lease into p.lease, or creates it renewed now (created true).
func (p *Publisher) readLease(ctx context.Context) (created bool, err error) {
	leases := p.cfg.Client.CoordinationV1().Leases(LeaseNamespace)
	now := metav1.NewMicroTime(p.clock.Now())
	lease, err := leases.Get(ctx, p.cfg.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		node, err := p.cfg.Client.CoreV1().Nodes().Get(ctx, p.cfg.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, fmt.Errorf("getting node for its lease: %w", err)
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
		if p.lease, err = leases.Create(ctx, lease, metav1.CreateOptions{}); err != nil {
			p.lease = nil
			return false, fmt.Errorf("creating lease: %w", err)
		}
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("getting lease: %w", err)
	}
	p.lease = lease
	return false, nil
}
