package podruntime

import (
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	v1 "k8s.io/api/core/v1"
	cri "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/kdm-project/kdm/devicemanager"
)

// The labels every sandbox and container carries: the kubelet's, and LabelManaged.
const (
	LabelPodUID        = "io.kubernetes.pod.uid"
	LabelPodName       = "io.kubernetes.pod.name"
	LabelPodNamespace  = "io.kubernetes.pod.namespace"
	LabelContainerName = "io.kubernetes.container.name"
	// LabelManaged (value "true") marks what a Runtime created; a Runtime lists, stops and
	// removes nothing without it.
	LabelManaged = "kdm.io/managed"
)

// Annotations a Runtime sets, the kubelet's names.
const (
	annotationRestartCount = "io.kubernetes.container.restartCount"
	annotationGracePeriod  = "io.kubernetes.pod.terminationGracePeriod"
)

// managedFilter selects what a Runtime created.
var managedFilter = map[string]string{LabelManaged: "true"}

func podLabels(pod *v1.Pod) map[string]string {
	l := make(map[string]string, len(pod.Labels)+4)
	for k, v := range pod.Labels {
		l[k] = v
	}
	l[LabelPodUID] = string(pod.UID)
	l[LabelPodName] = pod.Name
	l[LabelPodNamespace] = pod.Namespace
	l[LabelManaged] = "true"
	return l
}

// podLogDir is <PodLogsDir>/<namespace>_<name>_<uid>, the kubelet's layout.
func (r *Runtime) podLogDir(pod *v1.Pod) string {
	return filepath.Join(r.cfg.PodLogsDir, fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, pod.UID))
}

// gracePeriod is how long a pod's containers get between SIGTERM and SIGKILL.
func (r *Runtime) gracePeriod(pod *v1.Pod) time.Duration {
	if r.cfg.StopGracePeriod > 0 {
		return r.cfg.StopGracePeriod
	}
	if pod != nil && pod.Spec.TerminationGracePeriodSeconds != nil {
		return time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
	}
	return DefaultStopGracePeriod
}

// containerGracePeriod is the grace period of a container whose pod spec is unknown (an
// orphan): the one recorded in its annotation at creation, else the default.
func (r *Runtime) containerGracePeriod(c *cri.Container) time.Duration {
	if r.cfg.StopGracePeriod > 0 {
		return r.cfg.StopGracePeriod
	}
	if s, err := strconv.ParseInt(c.GetAnnotations()[annotationGracePeriod], 10, 64); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	return DefaultStopGracePeriod
}

// sandboxConfig is the pod's sandbox: host network, its own PID namespace, the pod's labels
// and annotations with ours.
func (r *Runtime) sandboxConfig(pod *v1.Pod, attempt uint32) *cri.PodSandboxConfig {
	ann := make(map[string]string, len(pod.Annotations))
	for k, v := range pod.Annotations {
		ann[k] = v
	}
	return &cri.PodSandboxConfig{
		Metadata: &cri.PodSandboxMetadata{
			Name: pod.Name, Namespace: pod.Namespace, Uid: string(pod.UID), Attempt: attempt,
		},
		LogDirectory: r.podLogDir(pod),
		Labels:       podLabels(pod),
		Annotations:  ann,
		Linux: &cri.LinuxPodSandboxConfig{
			SecurityContext: &cri.LinuxSandboxSecurityContext{NamespaceOptions: namespaceOptions()},
		},
	}
}

func namespaceOptions() *cri.NamespaceOption {
	return &cri.NamespaceOption{
		Network: cri.NamespaceMode_NODE,
		Pid:     cri.NamespaceMode_CONTAINER,
		Ipc:     cri.NamespaceMode_POD,
	}
}

// containerConfig builds a container's CRI config from its spec and the device manager's run
// options, converting the options as the kubelet does: devices with permissions, mounts with
// read-only, environment (the options' first, then the spec's plain values), annotations and
// CDI device names. restart is the container's restart count (metadata attempt).
func (r *Runtime) containerConfig(pod *v1.Pod, c *v1.Container, restart uint32, opts *devicemanager.RunContainerOptions) *cri.ContainerConfig {
	labels := podLabels(pod)
	for k := range pod.Labels {
		delete(labels, k) // a container carries the kubelet's labels only, not the pod's
	}
	labels[LabelContainerName] = c.Name

	cfg := &cri.ContainerConfig{
		Metadata:    &cri.ContainerMetadata{Name: c.Name, Attempt: restart},
		Image:       &cri.ImageSpec{Image: c.Image},
		Command:     c.Command,
		Args:        c.Args,
		WorkingDir:  c.WorkingDir,
		Labels:      labels,
		Annotations: map[string]string{},
		LogPath:     filepath.Join(c.Name, fmt.Sprintf("%d.log", restart)),
		Stdin:       c.Stdin,
		StdinOnce:   c.StdinOnce,
		Tty:         c.TTY,
		Linux: &cri.LinuxContainerConfig{
			SecurityContext: &cri.LinuxContainerSecurityContext{NamespaceOptions: namespaceOptions()},
		},
	}
	if opts != nil {
		for _, e := range opts.Envs {
			cfg.Envs = append(cfg.Envs, &cri.KeyValue{Key: e.Name, Value: []byte(e.Value)})
		}
		for _, d := range opts.Devices {
			cfg.Devices = append(cfg.Devices, &cri.Device{
				HostPath: d.PathOnHost, ContainerPath: d.PathInContainer, Permissions: d.Permissions,
			})
		}
		for _, m := range opts.Mounts {
			cfg.Mounts = append(cfg.Mounts, &cri.Mount{
				HostPath: m.HostPath, ContainerPath: m.ContainerPath, Readonly: m.ReadOnly,
			})
		}
		for _, a := range opts.Annotations {
			cfg.Annotations[a.Name] = a.Value
		}
		for _, d := range opts.CDIDevices {
			cfg.CDIDevices = append(cfg.CDIDevices, &cri.CDIDevice{Name: d.Name})
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			cfg.Envs = append(cfg.Envs, &cri.KeyValue{Key: e.Name, Value: []byte(e.Value)})
		}
	}
	cfg.Annotations[annotationRestartCount] = strconv.FormatUint(uint64(restart), 10)
	cfg.Annotations[annotationGracePeriod] = strconv.FormatInt(int64(r.gracePeriod(pod)/time.Second), 10)
	return cfg
}
