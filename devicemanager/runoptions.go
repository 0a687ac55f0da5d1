package devicemanager

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/internal/state"
)

// RunContainerOptions is what a container runtime needs to give a container its devices,
// merged over every resource the container holds.
type RunContainerOptions struct {
	Envs        []EnvVar
	Devices     []DeviceInfo
	Mounts      []Mount
	Annotations []Annotation
	CDIDevices  []CDIDevice
}

// EnvVar is an environment variable for the container.
type EnvVar struct{ Name, Value string }

// DeviceInfo is a device node to expose in the container.
type DeviceInfo struct{ PathOnHost, PathInContainer, Permissions string }

// Mount is a host path to mount in the container. Name is the container path.
type Mount struct {
	Name          string
	ContainerPath string
	HostPath      string
	ReadOnly      bool
}

// Annotation is a runtime annotation for the container.
type Annotation struct{ Name, Value string }

// CDIDevice is a fully qualified CDI device name (vendor.com/class=name).
type CDIDevice struct{ Name string }

// GetDeviceRunContainerOptions returns the merged run options of the container's devices,
// calling PreStartContainer first for plugins that require it (on every container start). An
// active pod whose container lost its cached allocation is allocated again. It returns nil
// options when the container holds no devices.
func (m *Manager) GetDeviceRunContainerOptions(ctx context.Context, pod *v1.Pod, container *v1.Container) (*RunContainerOptions, error) {
	podUID := string(pod.UID)
	needsReAlloc := false
	for _, res := range sortedLimitNames(container) {
		qty := container.Resources.Limits[v1.ResourceName(res)]
		m.mu.Lock()
		plugin := m.st.IsDevicePluginResource(res)
		m.mu.Unlock()
		if !plugin || qty.Value() == 0 {
			continue
		}
		if err := m.callPreStartContainerIfNeeded(ctx, podUID, container.Name, res); err != nil {
			return nil, err
		}
		if !m.isActive(podUID) {
			continue
		}
		m.mu.Lock()
		missing := m.st.ContainerDevices(podUID, container.Name, res) == nil
		m.mu.Unlock()
		if missing {
			needsReAlloc = true
		}
	}
	if needsReAlloc {
		m.log.V(2).Info("Allocating devices again for a container whose cached allocation is missing", "podUID", podUID, "containerName", container.Name)
		if err := m.Allocate(ctx, pod, container); err != nil {
			return nil, err
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.runOptionsLocked(podUID, container.Name), nil
}

// ContainerRunOptions returns the run options of the container's devices as they are assigned
// now, calling no plugin: what GetDeviceRunContainerOptions returns once its PreStartContainer
// calls are done. An agent that runs containers records these at admission and leaves
// GetDeviceRunContainerOptions, with its PreStartContainer, to the moment each container is
// created. Nil when the container holds no devices.
func (m *Manager) ContainerRunOptions(podUID, containerName string) *RunContainerOptions {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.runOptionsLocked(podUID, containerName)
}

func (m *Manager) isActive(podUID string) bool {
	m.mu.Lock()
	active := m.sources.ActivePods
	m.mu.Unlock()
	if active == nil {
		return false
	}
	for _, p := range active() {
		if string(p.UID) == podUID {
			return true
		}
	}
	return false
}

// callPreStartContainerIfNeeded calls PreStartContainer with the container's cached devices
// when the plugin asked for it, under the endpoint's PreStart deadline (30 s by default).
func (m *Manager) callPreStartContainerIfNeeded(ctx context.Context, podUID, container, res string) error {
	m.mu.Lock()
	info, ok := m.endpoints[res]
	if !ok {
		m.mu.Unlock()
		return fmt.Errorf("endpoint not found in cache for a registered resource: %s", res)
	}
	if info.opts == nil || !info.opts.PreStartRequired {
		m.mu.Unlock()
		return nil
	}
	ids := m.st.ContainerDevices(podUID, container, res)
	m.mu.Unlock()
	if ids == nil {
		return fmt.Errorf("no devices found allocated in local cache for pod %s, container %s, resource %s", podUID, container, res)
	}
	if _, err := info.ep.PreStartContainer(ctx, sets.List(ids)); err != nil {
		return fmt.Errorf("device plugin PreStartContainer rpc failed with err: %w", err)
	}
	return nil
}

// runOptionsLocked merges the Allocate responses of every resource the container holds: for
// envs, devices (by container path), mounts (by container path) and annotations the first
// value wins and conflicts are logged; CDI devices are de-duplicated by name. Resources are
// visited in name order. Callers hold mu.
func (m *Manager) runOptionsLocked(podUID, container string) *RunContainerOptions {
	resources := m.st.Allocations(podUID, container)
	if resources == nil {
		return nil
	}
	opts := &RunContainerOptions{}
	envs, devs, mounts, annos, cdi := map[string]string{}, map[string]string{}, map[string]string{}, map[string]string{}, sets.New[string]()
	conflict := func(kind, key, kept, dropped string) {
		m.log.Error(nil, "Conflicting device run option; keeping the first", "kind", kind, "key", key, "kept", kept, "dropped", dropped, "podUID", podUID, "containerName", container)
	}
	for _, res := range state.SortedKeys(resources) {
		resp := resources[res].Response()
		if resp == nil {
			continue
		}
		for _, k := range state.SortedKeys(resp.Envs) {
			v := resp.Envs[k]
			if prev, ok := envs[k]; ok {
				if prev != v {
					conflict("env", k, prev, v)
				}
				continue
			}
			envs[k] = v
			opts.Envs = append(opts.Envs, EnvVar{Name: k, Value: v})
		}
		for _, d := range resp.Devices {
			if prev, ok := devs[d.ContainerPath]; ok {
				if prev != d.HostPath {
					conflict("device", d.ContainerPath, prev, d.HostPath)
				}
				continue
			}
			devs[d.ContainerPath] = d.HostPath
			opts.Devices = append(opts.Devices, DeviceInfo{PathOnHost: d.HostPath, PathInContainer: d.ContainerPath, Permissions: d.Permissions})
		}
		for _, mt := range resp.Mounts {
			if prev, ok := mounts[mt.ContainerPath]; ok {
				if prev != mt.HostPath {
					conflict("mount", mt.ContainerPath, prev, mt.HostPath)
				}
				continue
			}
			mounts[mt.ContainerPath] = mt.HostPath
			opts.Mounts = append(opts.Mounts, Mount{Name: mt.ContainerPath, ContainerPath: mt.ContainerPath, HostPath: mt.HostPath, ReadOnly: mt.ReadOnly})
		}
		for _, k := range state.SortedKeys(resp.Annotations) {
			v := resp.Annotations[k]
			if prev, ok := annos[k]; ok {
				if prev != v {
					conflict("annotation", k, prev, v)
				}
				continue
			}
			annos[k] = v
			opts.Annotations = append(opts.Annotations, Annotation{Name: k, Value: v})
		}
		opts.CDIDevices = appendCDI(opts.CDIDevices, cdi, resp.CdiDevices)
	}
	return opts
}

func appendCDI(out []CDIDevice, seen sets.Set[string], in []*pluginapi.CDIDevice) []CDIDevice {
	for _, d := range in {
		if d == nil || seen.Has(d.Name) {
			continue
		}
		seen.Insert(d.Name)
		out = append(out, CDIDevice{Name: d.Name})
	}
	return out
}
