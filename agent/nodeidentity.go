package agent

import (
	"fmt"
	"maps"
	"runtime"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/kdm-project/kdm/agent/nodestatus"
)

// nodePublisherConfig describes the agent's Node as a kubelet would: capacity detected from
// the host (or CapacityOverride) plus NodeCapacity, allocatable less SystemReserved and
// KubeReserved, the kubernetes.io/arch, os and hostname labels, NodeLabels and
// RegisterWithTaints at registration, the InternalIP and Hostname addresses, and nodeInfo.
func (a *Agent) nodePublisherConfig() (nodestatus.Config, error) {
	cfg := a.cfg
	capacity := cfg.CapacityOverride.DeepCopy()
	if len(capacity) == 0 {
		detected, err := a.host.capacity(cfg.RootDir)
		if err != nil {
			return nodestatus.Config{}, fmt.Errorf("describing the node (a capacity override skips reading the host): %w", err)
		}
		capacity = detected
	}
	maps.Copy(capacity, cfg.NodeCapacity.DeepCopy())
	hostname := a.host.hostnameLabel(cfg.NodeName)
	ips, err := ParseNodeIPs(cfg.NodeIP) // valid: Validate passed
	if err != nil {
		return nodestatus.Config{}, err
	}
	addresses, err := a.host.addresses(ips, hostname)
	if err != nil {
		return nodestatus.Config{}, fmt.Errorf("describing the node: %w", err)
	}
	return nodestatus.Config{
		Client:   cfg.KubeClient,
		NodeName: cfg.NodeName,
		Devices:  a.manager,
		Capacity: capacity,
		Reserved: sumResources(cfg.SystemReserved, cfg.KubeReserved),
		Labels: map[string]string{
			v1.LabelArchStable: runtime.GOARCH,
			v1.LabelOSStable:   runtime.GOOS,
			v1.LabelHostname:   hostname,
		},
		RegisterLabels:       cfg.NodeLabels,
		RegisterTaints:       cfg.RegisterWithTaints,
		Addresses:            addresses,
		NodeInfo:             a.host.nodeInfo(),
		DropRemovedResources: a.manager.Policy().DropRemovedResources,
		UpdateFrequency:      cfg.NodeStatusUpdateFrequency,
		Clock:                a.clock,
		Logger:               a.log.WithName("node"),
	}, nil
}

// sumResources adds the lists name by name.
func sumResources(lists ...v1.ResourceList) v1.ResourceList {
	out := v1.ResourceList{}
	for _, list := range lists {
		for name, q := range list {
			sum, ok := out[name]
			if !ok {
				sum = *resource.NewQuantity(0, q.Format)
			}
			sum.Add(q)
			out[name] = sum
		}
	}
	return out
}
