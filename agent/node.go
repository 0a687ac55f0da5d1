package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// Node status timing, as the kubelet's defaults.
const (
	// DefaultNodeStatusUpdateFrequency is how often the Node's device resources are checked
	// and the Lease renewed.
	DefaultNodeStatusUpdateFrequency = 10 * time.Second
	// DefaultNodeLeaseDuration is the Lease's leaseDurationSeconds.
	DefaultNodeLeaseDuration = 40 * time.Second
	// nodeStatusReportFrequency re-posts an unchanged status so the Ready heartbeat stays fresh.
	nodeStatusReportFrequency = 5 * time.Minute
	// NodeLeaseNamespace holds one Lease per node.
	NodeLeaseNamespace = "kube-node-lease"
)

// DeviceCapacity is what a NodePublisher needs of a device manager; *devicemanager.ManagerImpl
// implements it.
type DeviceCapacity interface {
	GetCapacity() (capacity, allocatable v1.ResourceList, removed []string)
	ShouldResetExtendedResourceCapacity() bool
	DeviceChanges() <-chan struct{}
}

// NodePublisher keeps a Node object's device-plugin resources and its Lease in step with a
// device manager. It owns only the extended resources the manager reports (and those a
// recreated node zeroes) and BaseCapacity; other capacity keys, labels and conditions set by
// others are kept.
type NodePublisher struct {
	Client   kubernetes.Interface
	NodeName string
	Devices  DeviceCapacity
	// BaseCapacity is published in capacity and allocatable beside the device resources, for
	// the resources the embedder owns (the daemon publishes pods: --max-pods, so that a
	// scheduler may place pods; a provider that runs containers adds cpu and memory).
	BaseCapacity v1.ResourceList
	// DropRemovedResources deletes a removed resource from the Node instead of publishing it
	// as 0 (the kubelet's way).
	DropRemovedResources bool
	// UpdateFrequency defaults to DefaultNodeStatusUpdateFrequency, LeaseDuration to
	// DefaultNodeLeaseDuration.
	UpdateFrequency time.Duration
	LeaseDuration   time.Duration
	Logger          klog.Logger

	lastReport time.Time
	published  sets.Set[string] // resources of the last successful status write
}

// Run registers the node (creating it if absent, zeroing stale extended resources if the
// device manager says the node was recreated), then publishes capacity and allocatable on every
// device change and every UpdateFrequency, and renews the Lease, until ctx ends. API errors are
// logged and retried on the next tick; Run returns nil when ctx ends.
func (p *NodePublisher) Run(ctx context.Context) error {
	if p.Client == nil || p.NodeName == "" || p.Devices == nil {
		return errors.New("node publisher needs Client, NodeName and Devices")
	}
	if p.UpdateFrequency <= 0 {
		p.UpdateFrequency = DefaultNodeStatusUpdateFrequency
	}
	if p.LeaseDuration <= 0 {
		p.LeaseDuration = DefaultNodeLeaseDuration
	}
	if p.Logger.GetSink() == nil {
		p.Logger = klog.Background()
	}
	log := p.Logger.WithValues("node", klog.KRef("", p.NodeName))
	for {
		err := p.register(ctx)
		if err == nil {
			break
		}
		log.Error(err, "Unable to register node with API server")
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(p.UpdateFrequency / 2):
		}
	}
	t := time.NewTicker(p.UpdateFrequency)
	defer t.Stop()
	leaseRenewed := time.Now() // register renewed it
	for {
		changed := p.Devices.DeviceChanges()
		if err := p.syncStatus(ctx); err != nil && ctx.Err() == nil {
			log.Error(err, "Error updating node status, will retry")
		}
		// Renewal is due by time, not by tick, so a stream of device changes cannot starve it.
		if time.Since(leaseRenewed) >= p.UpdateFrequency*9/10 {
			if err := p.renewLease(ctx); err != nil && ctx.Err() == nil {
				log.Error(err, "Failed to update lease")
			} else {
				leaseRenewed = time.Now()
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-t.C:
		}
	}
}

// register creates the Node if absent; an existing Node is zeroed in its extended resources
// when the node's device state was wiped, as the kubelet does, until plugins report again.
func (p *NodePublisher) register(ctx context.Context) error {
	nodes := p.Client.CoreV1().Nodes()
	_, err := nodes.Get(ctx, p.NodeName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		node := &v1.Node{ObjectMeta: metav1.ObjectMeta{
			Name: p.NodeName,
			Labels: map[string]string{
				v1.LabelHostname: p.NodeName,
				v1.LabelOSStable: "linux",
			},
		}}
		if _, err := nodes.Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating node: %w", err)
		}
		p.Logger.Info("Successfully registered node", "node", klog.KRef("", p.NodeName))
	case err != nil:
		return fmt.Errorf("getting node: %w", err)
	case p.Devices.ShouldResetExtendedResourceCapacity():
		err := p.updateStatus(ctx, func(st *v1.NodeStatus) {
			for _, list := range []v1.ResourceList{st.Capacity, st.Allocatable} {
				for name := range list {
					if IsExtendedResourceName(name) {
						list[name] = *resource.NewQuantity(0, resource.DecimalSI)
					}
				}
			}
		})
		if err != nil {
			return fmt.Errorf("zeroing extended resources of recreated node: %w", err)
		}
		p.Logger.Info("Zeroed extended resources of a recreated node", "node", klog.KRef("", p.NodeName))
	}
	return p.renewLease(ctx)
}

// syncStatus publishes the manager's capacity and allocatable, and the Ready condition. An
// unchanged status is written only every nodeStatusReportFrequency.
func (p *NodePublisher) syncStatus(ctx context.Context) error {
	capacity, allocatable, removed := p.Devices.GetCapacity()
	if len(removed) > 0 {
		p.Logger.Info("Device plugin resources removed from the node", "resourceNames", removed)
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
	removed = sets.List(gone)
	err := p.updateStatus(ctx, func(st *v1.NodeStatus) {
		if st.Capacity == nil {
			st.Capacity = v1.ResourceList{}
		}
		if st.Allocatable == nil {
			st.Allocatable = v1.ResourceList{}
		}
		for name, q := range p.BaseCapacity {
			st.Capacity[name], st.Allocatable[name] = q, q
		}
		for name, q := range capacity {
			st.Capacity[name] = q
		}
		for name, q := range allocatable {
			st.Allocatable[name] = q
		}
		for _, r := range removed {
			name := v1.ResourceName(r)
			if p.DropRemovedResources {
				delete(st.Capacity, name)
				delete(st.Allocatable, name)
				continue
			}
			st.Capacity[name] = *resource.NewQuantity(0, resource.DecimalSI)
			st.Allocatable[name] = *resource.NewQuantity(0, resource.DecimalSI)
		}
		setReadyCondition(st)
	})
	if err != nil {
		return err
	}
	p.published = sets.New[string]()
	for name := range capacity {
		p.published.Insert(string(name))
	}
	return nil
}

// updateStatus applies mutate to the Node's status and writes it if anything changed or the
// last report is old, retrying on conflict with a fresh read.
func (p *NodePublisher) updateStatus(ctx context.Context, mutate func(*v1.NodeStatus)) error {
	nodes := p.Client.CoreV1().Nodes()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := nodes.Get(ctx, p.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		updated := node.DeepCopy()
		mutate(&updated.Status)
		if statusEqual(node.Status, updated.Status) && time.Since(p.lastReport) < nodeStatusReportFrequency {
			return nil
		}
		stampHeartbeat(&updated.Status)
		if _, err := nodes.UpdateStatus(ctx, updated, metav1.UpdateOptions{}); err != nil {
			return err
		}
		p.lastReport = time.Now()
		p.Logger.V(2).Info("Updated node status", "node", klog.KObj(updated),
			"capacity", extendedOnly(updated.Status.Capacity), "allocatable", extendedOnly(updated.Status.Allocatable))
		return nil
	})
}

// renewLease creates or renews the node's Lease in kube-node-lease, owned by the Node.
func (p *NodePublisher) renewLease(ctx context.Context) error {
	leases := p.Client.CoordinationV1().Leases(NodeLeaseNamespace)
	now := metav1.NewMicroTime(time.Now())
	lease, err := leases.Get(ctx, p.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		node, err := p.Client.CoreV1().Nodes().Get(ctx, p.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		lease = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{
				Name:      p.NodeName,
				Namespace: NodeLeaseNamespace,
				OwnerReferences: []metav1.OwnerReference{{
					APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID,
				}},
			},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To(p.NodeName),
				LeaseDurationSeconds: ptr.To(int32(p.LeaseDuration / time.Second)),
				RenewTime:            &now,
			},
		}
		_, err = leases.Create(ctx, lease, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	lease.Spec.RenewTime = &now
	lease.Spec.HolderIdentity = ptr.To(p.NodeName)
	_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
	return err
}

// IsExtendedResourceName reports whether name is an extended resource: a qualified name outside
// the kubernetes.io domains and not a quota "requests." name. Device-plugin resources are.
func IsExtendedResourceName(name v1.ResourceName) bool {
	s := string(name)
	if !strings.Contains(s, "/") || strings.HasPrefix(s, "requests.") {
		return false
	}
	domain := s[:strings.Index(s, "/")]
	return domain != "kubernetes.io" && !strings.HasSuffix(domain, ".kubernetes.io")
}

// setReadyCondition marks the node Ready: kdm's node is ready while it posts status.
func setReadyCondition(st *v1.NodeStatus) {
	for i := range st.Conditions {
		c := &st.Conditions[i]
		if c.Type == v1.NodeReady {
			if c.Status != v1.ConditionTrue {
				c.Status, c.Reason, c.Message = v1.ConditionTrue, "KDMReady", "kdm is posting ready status"
				c.LastTransitionTime = metav1.Now()
			}
			return
		}
	}
	now := metav1.Now()
	st.Conditions = append(st.Conditions, v1.NodeCondition{
		Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KDMReady",
		Message: "kdm is posting ready status", LastTransitionTime: now, LastHeartbeatTime: now,
	})
}

// stampHeartbeat refreshes the Ready condition's heartbeat of a status about to be written.
func stampHeartbeat(st *v1.NodeStatus) {
	for i := range st.Conditions {
		if st.Conditions[i].Type == v1.NodeReady {
			st.Conditions[i].LastHeartbeatTime = metav1.Now()
		}
	}
}

// statusEqual compares what the publisher writes: resources and condition states.
func statusEqual(a, b v1.NodeStatus) bool {
	if !resourcesEqual(a.Capacity, b.Capacity) || !resourcesEqual(a.Allocatable, b.Allocatable) ||
		len(a.Conditions) != len(b.Conditions) {
		return false
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
		if IsExtendedResourceName(name) {
			out[string(name)] = q.Value()
		}
	}
	return out
}
