package devicemanager

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
)

// resourceCollector exports what an operator alerts on, per resource, read from the manager
// at scrape time so that it always agrees with GetCapacity and Resources:
//
//   - kdm_resource_capacity{resource} and kdm_resource_allocatable{resource}: what GetCapacity
//     reports, which is what the Node publishes (the kubelet has no such metric; its values
//     reach the Node object's status.capacity and status.allocatable);
//   - kdm_resource_devices{resource,health}: the devices of the plugin's last list by health
//     ("healthy", "unhealthy"), allocated ones included;
//   - kdm_plugin_up{resource}: 1 while a connected plugin instance serves the resource, 0 while
//     it is known (from a list or the checkpoint) but served by none.
//
// A resource removed after its grace period has no capacity series.
type resourceCollector struct {
	m                                  *Manager
	capacity, allocatable, devices, up *prometheus.Desc
}

func newResourceCollector(m *Manager) *resourceCollector {
	return &resourceCollector{
		m: m,
		capacity: prometheus.NewDesc("kdm_resource_capacity",
			"Devices of the resource counted in the node's capacity, as GetCapacity reports them.", []string{"resource"}, nil),
		allocatable: prometheus.NewDesc("kdm_resource_allocatable",
			"Devices of the resource counted in the node's allocatable (healthy ones), as GetCapacity reports them.", []string{"resource"}, nil),
		devices: prometheus.NewDesc("kdm_resource_devices",
			"Devices of the resource in its plugin's last list, by health.", []string{"resource", "health"}, nil),
		up: prometheus.NewDesc("kdm_plugin_up",
			"1 while a connected device plugin instance serves the resource, 0 while none does.", []string{"resource"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *resourceCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.capacity, c.allocatable, c.devices, c.up} {
		ch <- d
	}
}

// Collect implements prometheus.Collector. It takes the manager's lock once, briefly, to
// count the device sets; set sizes are kept, so a scrape costs the same at a million devices.
func (c *resourceCollector) Collect(ch chan<- prometheus.Metric) {
	capacity, allocatable, _ := c.m.GetCapacity()
	for name, q := range capacity {
		ch <- prometheus.MustNewConstMetric(c.capacity, prometheus.GaugeValue, float64(q.Value()), string(name))
		a := allocatable[v1.ResourceName(name)]
		ch <- prometheus.MustNewConstMetric(c.allocatable, prometheus.GaugeValue, float64(a.Value()), string(name))
	}
	type counts struct {
		listed             bool
		healthy, unhealthy int
		up                 bool
	}
	per := map[string]counts{}
	c.m.mu.Lock()
	for _, res := range c.m.st.Names() {
		h := c.m.st.Healthy(res)
		per[res] = counts{listed: h != nil, healthy: h.Len(), unhealthy: c.m.st.Unhealthy(res).Len()}
	}
	for res, info := range c.m.endpoints {
		n := per[res]
		n.up = info.ep != nil && !info.ep.IsStopped()
		per[res] = n
	}
	c.m.mu.Unlock()
	for res, n := range per {
		if n.listed {
			ch <- prometheus.MustNewConstMetric(c.devices, prometheus.GaugeValue, float64(n.healthy), res, "healthy")
			ch <- prometheus.MustNewConstMetric(c.devices, prometheus.GaugeValue, float64(n.unhealthy), res, "unhealthy")
		}
		up := 0.0
		if n.up {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, up, res)
	}
}

// registerResourceCollector registers m's resourceCollector on reg (nothing when reg is nil).
// A collector of an earlier manager on the same registry (a restart in the same process) is
// replaced, so the series always describe the newest manager.
func registerResourceCollector(reg prometheus.Registerer, m *Manager) error {
	if reg == nil {
		return nil
	}
	c := newResourceCollector(m)
	err := reg.Register(c)
	var already prometheus.AlreadyRegisteredError
	if errors.As(err, &already) {
		reg.Unregister(already.ExistingCollector)
		err = reg.Register(c)
	}
	return err
}
