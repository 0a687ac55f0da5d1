package podresources

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the kubelet's podresources counters, labelled by server_api_version.
type metrics struct {
	requests, list, getAllocatable, get         *prometheus.CounterVec
	errorsList, errorsGetAllocatable, errorsGet *prometheus.CounterVec
}

func newMetrics() *metrics {
	c := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Subsystem: "kubelet", Name: name, Help: help}, []string{"server_api_version"})
	}
	return &metrics{
		requests:             c("pod_resources_endpoint_requests_total", "Cumulative number of requests to the PodResource endpoint. Broken down by server api version."),
		list:                 c("pod_resources_endpoint_requests_list", "Number of requests to the PodResource List endpoint. Broken down by server api version."),
		getAllocatable:       c("pod_resources_endpoint_requests_get_allocatable", "Number of requests to the PodResource GetAllocatableResources endpoint. Broken down by server api version."),
		get:                  c("pod_resources_endpoint_requests_get", "Number of requests to the PodResource Get endpoint. Broken down by server api version."),
		errorsList:           c("pod_resources_endpoint_errors_list", "Number of requests to the PodResource List endpoint which returned error. Broken down by server api version."),
		errorsGetAllocatable: c("pod_resources_endpoint_errors_get_allocatable", "Number of requests to the PodResource GetAllocatableResources endpoint which returned error. Broken down by server api version."),
		errorsGet:            c("pod_resources_endpoint_errors_get", "Number of requests to the PodResource Get endpoint which returned error. Broken down by server api version."),
	}
}

func (m *metrics) register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.requests, m.list, m.getAllocatable, m.get, m.errorsList, m.errorsGetAllocatable, m.errorsGet} {
		if err := reg.Register(c); err != nil {
			var already prometheus.AlreadyRegisteredError
			if !errors.As(err, &already) {
				return err
			}
		}
	}
	return nil
}
