package agent_test

import (
	"context"
	"log"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kdm-project/kdm/agent"
	"github.com/kdm-project/kdm/agent/nodestatus"
	"github.com/kdm-project/kdm/devicemanager"
)

// An edge agent joins a cluster with the whole agent: the pods bound to the node are
// admitted, their outcome is written to pod status, and the Node's device resources and Lease
// are published. This is what `kdm run --kubeconfig FILE --node-name NAME` does.
func Example_joinCluster() {
	restCfg, err := clientcmd.BuildConfigFromFlags("", "/etc/kdm/kubeconfig")
	if err != nil {
		log.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(restCfg)
	a, err := agent.New(agent.Config{
		KubeClient: client,
		NodeName:   "edge-1",
		Policy:     devicemanager.KDMPolicy(),
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := a.Run(context.Background()); err != nil {
		log.Fatal(err)
	}
}

// A virtual-kubelet provider keeps its own pod lifecycle and calls the library: the device
// manager admits its pods, and a nodestatus.Publisher keeps the Node's device resources current.
func Example_provider() {
	ctx := context.Background()
	var client kubernetes.Interface // the provider's client
	var providerPods func() []*v1.Pod
	m, err := devicemanager.New(devicemanager.Config{
		PluginDir: "/var/lib/kubelet/device-plugins",
		Policy:    devicemanager.KDMPolicy(),
	})
	if err != nil {
		log.Fatal(err)
	}
	ready := func() bool { return true } // the provider has listed its pods
	if err := m.Start(ctx, devicemanager.Sources{ActivePods: providerPods, SourcesReady: ready}); err != nil {
		log.Fatal(err)
	}
	defer func() { _ = m.Stop() }()
	ctx, cancel := context.WithCancel(ctx)
	published := make(chan struct{})
	go func() {
		defer close(published)
		// The provider runs the containers: it publishes their host's capacity itself.
		publisher, err := nodestatus.NewPublisher(nodestatus.Config{
			Client: client, NodeName: "vk-gpu", Devices: m,
			Capacity: v1.ResourceList{
				v1.ResourceCPU:    resource.MustParse("64"),
				v1.ResourceMemory: resource.MustParse("256Gi"),
				v1.ResourcePods:   resource.MustParse("110"),
			},
		})
		if err != nil {
			log.Print(err)
			return
		}
		_ = publisher.Run(ctx)
	}()
	defer func() { cancel(); <-published }() // the publisher stops before the manager

	// In the provider's CreatePod: admit, then start the containers with the run options.
	admit := func(pod *v1.Pod) error {
		for i := range pod.Spec.InitContainers {
			if err := m.Allocate(ctx, pod, &pod.Spec.InitContainers[i]); err != nil {
				return err // report Failed, reason agent.ReasonUnexpectedAdmissionError
			}
		}
		for i := range pod.Spec.Containers {
			if err := m.Allocate(ctx, pod, &pod.Spec.Containers[i]); err != nil {
				return err
			}
			opts, err := m.GetDeviceRunContainerOptions(ctx, pod, &pod.Spec.Containers[i])
			if err != nil {
				return err
			}
			_ = opts // devices, mounts, env and annotations for the container runtime
		}
		return nil
	}
	_ = admit
	// In the provider's DeletePod: forget the pod and release its devices.
	m.UpdateAllocatedDevices()
}
