package devicemanager

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the kubelet's device-manager metrics, with the kubelet's names and labels.
type metrics struct {
	registrations *prometheus.CounterVec
	allocDuration *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		registrations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "kubelet",
			Name:      "device_plugin_registration_total",
			Help:      "Cumulative number of device plugin registrations. Broken down by resource name.",
		}, []string{"resource_name"}),
		allocDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: "kubelet",
			Name:      "device_plugin_alloc_duration_seconds",
			Help:      "Duration in seconds to serve a device plugin Allocation request. Broken down by resource name.",
			Buckets:   prometheus.DefBuckets,
		}, []string{"resource_name"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.registrations, m.allocDuration} {
		if err := reg.Register(c); err != nil {
			var already prometheus.AlreadyRegisteredError
			if !errors.As(err, &already) {
				return nil, err
			}
		}
	}
	return m, nil
}
