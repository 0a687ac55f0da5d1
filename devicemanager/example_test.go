package devicemanager_test

import (
	"context"
	"log"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"

	"github.com/kdm-project/kdm/devicemanager"
)

// An embedder passes its own logger and metrics registry, waits until the resource its
// first pods need is served, then admits them.
func ExampleManager_WaitForResource() {
	logger := funcr.New(func(prefix, args string) { log.Println(prefix, args) }, funcr.Options{Verbosity: 2})
	registry := prometheus.NewRegistry() // served by the embedder's own /metrics
	var activePods func() []*v1.Pod      // the embedder's pods
	m, err := devicemanager.New(devicemanager.Config{
		PluginDir:  "/var/lib/kubelet/device-plugins",
		Policy:     devicemanager.KubeletPolicy(),
		Logger:     logger,
		Registerer: registry,
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	if err := m.Start(ctx, devicemanager.Sources{ActivePods: activePods}); err != nil {
		log.Fatal(err)
	}
	defer func() { _ = m.Stop() }()

	wait, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := m.WaitForResource(wait, "nvidia.com/gpu"); err != nil {
		log.Printf("admitting without GPUs for now: %v", err)
	}
	capacity, allocatable, _ := m.GetCapacity()
	log.Printf("nvidia.com/gpu: capacity %v, allocatable %v",
		capacity.Name("nvidia.com/gpu", "DecimalSI"), allocatable.Name("nvidia.com/gpu", "DecimalSI"))
}
