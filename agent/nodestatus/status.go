package nodestatus

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/kdm-project/kdm/agent/internal/kubeapi"
	"github.com/kdm-project/kdm/internal/resourcename"
)

// register creates the Node if absent, with Labels, RegisterLabels and RegisterTaints. An
// existing Node gets Labels back if they differ, and its extended resources are zeroed when
// the node's device state was wiped, as the kubelet does, until plugins report again.
func (p *Publisher) register(ctx context.Context) error {
	nodes := p.cfg.Client.CoreV1().Nodes()
	node, err := nodes.Get(ctx, p.cfg.NodeName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		labels := maps.Clone(p.cfg.RegisterLabels)
		if labels == nil {
			labels = map[string]string{}
		}
		maps.Copy(labels, p.cfg.Labels)
		node := &v1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: p.cfg.NodeName, Labels: labels},
			Spec:       v1.NodeSpec{Taints: p.cfg.RegisterTaints},
		}
		if _, err := nodes.Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating node: %w", err)
		}
		p.log.Info("Successfully registered node")
	case err != nil:
		return fmt.Errorf("getting node: %w", err)
	default:
		if err := p.restoreLabels(ctx, node); err != nil {
			return err
		}
		if p.cfg.Devices.ShouldResetExtendedResourceCapacity() {
			_, err := p.patchStatus(ctx, node, func(st *v1.NodeStatus) {
				for _, list := range []v1.ResourceList{st.Capacity, st.Allocatable} {
					for name := range list {
						if resourcename.IsExtended(string(name)) {
							list[name] = *resource.NewQuantity(0, resource.DecimalSI)
						}
					}
				}
			}, true)
			if err != nil {
				return fmt.Errorf("zeroing extended resources of recreated node: %w", err)
			}
			p.log.Info("Zeroed extended resources of a recreated node")
		}
	}
	if err := p.renewLease(ctx); err != nil {
		return err
	}
	p.leaseRenewed = p.clock.Now()
	return nil
}

// restoreLabels patches the Node's labels that differ from Labels.
func (p *Publisher) restoreLabels(ctx context.Context, node *v1.Node) error {
	diff := map[string]string{}
	for k, v := range p.cfg.Labels {
		if node.Labels[k] != v {
			diff[k] = v
		}
	}
	if len(diff) == 0 {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": diff}})
	if err != nil {
		return err
	}
	if _, err := p.cfg.Client.CoreV1().Nodes().Patch(ctx, node.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("updating node labels: %w", err)
	}
	p.log.Info("Updated node labels", "labels", diff)
	return nil
}

// syncStatus publishes capacity and allocatable (Capacity less Reserved, and the manager's
// device resources), addresses, nodeInfo and the Ready condition. An unchanged status is
// written only every nodeStatusReportFrequency.
func (p *Publisher) syncStatus(ctx context.Context) error {
	node := p.node
	if node == nil || hasNotReadyTaint(node) {
		var err error
		if node, err = p.cfg.Client.CoreV1().Nodes().Get(ctx, p.cfg.NodeName, metav1.GetOptions{}); err != nil {
			return fmt.Errorf("getting node: %w", err)
		}
		p.node = node
	}
	capacity, allocatable, removed := p.cfg.Devices.GetCapacity()
	if len(removed) > 0 {
		p.log.Info("Device plugin resources removed from the node", "resourceNames", removed)
	}
	// The manager names a removed resource once, to whichever caller asks first (an HTTP
	// /status read may have): a resource this publisher published that the manager no longer
	// reports is removed too.
	gone := sets.New(removed...)
	for name := range p.published {
		if _, ok := capacity[v1.ResourceName(name)]; !ok {
			gone.Insert(name)
		}
	}
	now := metav1.NewTime(p.clock.Now())
	written, err := p.patchStatus(ctx, node, func(st *v1.NodeStatus) {
		if st.Capacity == nil {
			st.Capacity = v1.ResourceList{}
		}
		if st.Allocatable == nil {
			st.Allocatable = v1.ResourceList{}
		}
		for name, q := range p.cfg.Capacity {
			st.Capacity[name], st.Allocatable[name] = q, allocatableOf(q, p.cfg.Reserved[name])
		}
		maps.Copy(st.Capacity, capacity)
		maps.Copy(st.Allocatable, allocatable)
		for _, r := range sets.List(gone) {
			name := v1.ResourceName(r)
			if p.cfg.DropRemovedResources {
				delete(st.Capacity, name)
				delete(st.Allocatable, name)
				continue
			}
			st.Capacity[name] = *resource.NewQuantity(0, resource.DecimalSI)
			st.Allocatable[name] = *resource.NewQuantity(0, resource.DecimalSI)
		}
		if len(p.cfg.Addresses) > 0 {
			st.Addresses = p.cfg.Addresses
		}
		if p.cfg.NodeInfo != (v1.NodeSystemInfo{}) {
			st.NodeInfo = p.cfg.NodeInfo
		}
		setReadyCondition(st, now)
	}, false)
	if err != nil {
		p.node = nil
		return err
	}
	p.node = written
	p.published = sets.New[string]()
	for name := range capacity {
		p.published.Insert(string(name))
	}
	p.checkNotReadyTaint(written)
	return nil
}

// allocatableOf is capacity less reserved, never below zero.
func allocatableOf(capacity, reserved resource.Quantity) resource.Quantity {
	out := capacity.DeepCopy()
	out.Sub(reserved)
	if out.Sign() < 0 {
		return *resource.NewQuantity(0, capacity.Format)
	}
	return out
}

// patchStatus applies mutate to a copy of node's status and, if anything changed, force is
// set or the last report is old, writes it with a strategic merge patch of the status
// subresource. It returns the Node as written (or node when nothing was written).
func (p *Publisher) patchStatus(ctx context.Context, node *v1.Node, mutate func(*v1.NodeStatus), force bool) (*v1.Node, error) {
	updated := node.DeepCopy()
	mutate(&updated.Status)
	if !force && statusEqual(node.Status, updated.Status) && p.clock.Since(p.lastReport) < nodeStatusReportFrequency {
		return node, nil
	}
	stampHeartbeat(&updated.Status, metav1.NewTime(p.clock.Now()))
	patch, err := kubeapi.StatusPatch(&v1.Node{Status: node.Status}, &v1.Node{Status: updated.Status}, v1.Node{})
	if err != nil {
		return nil, fmt.Errorf("building node status patch: %w", err)
	}
	written, err := p.cfg.Client.CoreV1().Nodes().Patch(ctx, node.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		return nil, fmt.Errorf("patching node status: %w", err)
	}
	p.lastReport = p.clock.Now()
	p.log.V(2).Info("Updated node status",
		"capacity", extendedOnly(written.Status.Capacity), "allocatable", extendedOnly(written.Status.Allocatable))
	return written, nil
}

// checkNotReadyTaint logs, once per occurrence, that the Node has kept the not-ready taint
// for notReadyTaintHintAfter while kdm reports it Ready: only the node lifecycle controller
// of kube-controller-manager removes it, and pods without a toleration stay unscheduled.
func (p *Publisher) checkNotReadyTaint(node *v1.Node) {
	if !hasNotReadyTaint(node) {
		p.notReadySince, p.hinted = time.Time{}, false
		return
	}
	now := p.clock.Now()
	if p.notReadySince.IsZero() {
		p.notReadySince = now
	}
	if p.hinted || now.Sub(p.notReadySince) < notReadyTaintHintAfter {
		return
	}
	p.hinted = true
	p.log.Info("Node is Ready but still has the not-ready taint; only the node lifecycle controller of kube-controller-manager removes it: is it running? Until then only pods that tolerate the taint are scheduled here",
		"taint", v1.TaintNodeNotReady+":"+string(v1.TaintEffectNoSchedule), "since", p.notReadySince)
}

// hasNotReadyTaint reports whether the Node has the node lifecycle controller's not-ready
// NoSchedule taint.
func hasNotReadyTaint(node *v1.Node) bool {
	for _, t := range node.Spec.Taints {
		if t.Key == v1.TaintNodeNotReady && t.Effect == v1.TaintEffectNoSchedule {
			return true
		}
	}
	return false
}

// setReadyCondition marks the node Ready: kdm's node is ready while it posts status.
func setReadyCondition(st *v1.NodeStatus, now metav1.Time) {
	for i := range st.Conditions {
		c := &st.Conditions[i]
		if c.Type == v1.NodeReady {
			if c.Status != v1.ConditionTrue {
				c.Status, c.Reason, c.Message = v1.ConditionTrue, "KDMReady", "kdm is posting ready status"
				c.LastTransitionTime = now
			}
			return
		}
	}
	st.Conditions = append(st.Conditions, v1.NodeCondition{
		Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KDMReady",
		Message: "kdm is posting ready status", LastTransitionTime: now, LastHeartbeatTime: now,
	})
}

// stampHeartbeat refreshes the Ready condition's heartbeat of a status about to be written.
func stampHeartbeat(st *v1.NodeStatus, now metav1.Time) {
	for i := range st.Conditions {
		if st.Conditions[i].Type == v1.NodeReady {
			st.Conditions[i].LastHeartbeatTime = now
		}
	}
}

// statusEqual compares what the publisher writes: resources, addresses, nodeInfo and
// condition states.
func statusEqual(a, b v1.NodeStatus) bool {
	if !resourcesEqual(a.Capacity, b.Capacity) || !resourcesEqual(a.Allocatable, b.Allocatable) ||
		len(a.Conditions) != len(b.Conditions) || a.NodeInfo != b.NodeInfo || len(a.Addresses) != len(b.Addresses) {
		return false
	}
	for i := range a.Addresses {
		if a.Addresses[i] != b.Addresses[i] {
			return false
		}
	}
	for i := range a.Conditions {
		if a.Conditions[i].Type != b.Conditions[i].Type || a.Conditions[i].Status != b.Conditions[i].Status {
			return false
		}
	}
	return true
}

func resourcesEqual(a, b v1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for name, q := range a {
		if other, ok := b[name]; !ok || q.Cmp(other) != 0 {
			return false
		}
	}
	return true
}

func extendedOnly(list v1.ResourceList) map[string]int64 {
	out := map[string]int64{}
	for name, q := range list {
		if resourcename.IsExtended(string(name)) {
			out[string(name)] = q.Value()
		}
	}
	return out
}
