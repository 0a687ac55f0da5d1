package devicemanager

import (
	"errors"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// maxRegistrationLabels bounds the distinct resource_name values of the registration counter.
// Register requests are counted per name as the kubelet does, but a flood of made-up names
// must not grow the registry for ever: past the bound, new names count as otherResourceLabel.
const maxRegistrationLabels = 512

// otherResourceLabel is the resource_name of registrations past maxRegistrationLabels names.
const otherResourceLabel = "<other>"

// metrics are the kubelet's device-manager metrics, with the kubelet's names and labels.
type metrics struct {
	registrations *prometheus.CounterVec
	allocDuration *prometheus.HistogramVec
	// disagreements counts the containers' resources for which a restored checkpoint and the
	// embedder's records disagreed (records.go); kdm's own, the kubelet has no such records.
	disagreements prometheus.Counter

	labelsMu           sync.Mutex
	registrationLabels map[string]struct{} // resource names with their own registration series
}

// countRegistration counts one Register request for resource (see maxRegistrationLabels).
func (m *metrics) countRegistration(resource string) {
	m.labelsMu.Lock()
	if _, ok := m.registrationLabels[resource]; !ok {
		if len(m.registrationLabels) < maxRegistrationLabels {
			m.registrationLabels[resource] = struct{}{}
		} else {
			resource = otherResourceLabel
		}
	}
	m.labelsMu.Unlock()
	m.registrations.WithLabelValues(resource).Inc()
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
		disagreements: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kdm_checkpoint_record_disagreements_total",
			Help: "Cumulative number of containers' device assignments for which the checkpoint read at start and kdm's own pod records disagreed.",
		}),
		registrationLabels: map[string]struct{}{},
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.registrations, m.allocDuration, m.disagreements} {
		if err := reg.Register(c); err != nil {
			var already prometheus.AlreadyRegisteredError
			if !errors.As(err, &already) {
				return nil, err
			}
		}
	}
	return m, nil
}
