package scenario

import (
	"fmt"
	"strconv"
	"strings"
)

// ContainerKind is where a container of a scenario pod runs.
type ContainerKind string

// Container kinds of the pod grammar.
const (
	InitContainer    ContainerKind = "init"    // a regular init container
	SidecarContainer ContainerKind = "sidecar" // a restartable init container
	AppContainer     ContainerKind = "app"
)

// ContainerSpec is one container of a `pod admit` command: its name, kind, and the devices it
// asks for (Count of plugin Resource, e.g. "gpu").
type ContainerSpec struct {
	Name     string
	Kind     ContainerKind
	Resource string
	Count    int
}

// ParsePodSpec reads the container arguments of `pod admit NAME ...`: "init=gpu:1",
// "sidecar=nic:1", "app=gpu:2", or the short "gpu=2" for an app container. Init containers
// and sidecars are named init-N and sidecar-N by their position among the init containers,
// app containers app-N. A pod needs at least one app container.
func ParsePodSpec(args []string) ([]ContainerSpec, error) {
	var out []ContainerSpec
	inits, apps := 0, 0
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		if !ok {
			return nil, fmt.Errorf("bad pod argument %q (want kind=resource:count or resource=count)", a)
		}
		kind, spec := ContainerKind(k), v
		if kind != InitContainer && kind != SidecarContainer && kind != AppContainer {
			kind, spec = AppContainer, k+":"+v
		}
		res, count, ok := strings.Cut(spec, ":")
		if !ok || res == "" {
			return nil, fmt.Errorf("bad container spec %q (want resource:count)", spec)
		}
		n, err := strconv.Atoi(count)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("bad count in %q: want a whole number of devices", spec)
		}
		c := ContainerSpec{Kind: kind, Resource: res, Count: n}
		switch kind {
		case AppContainer:
			c.Name = fmt.Sprintf("app-%d", apps)
			apps++
		default:
			c.Name = fmt.Sprintf("%s-%d", kind, inits)
			inits++
		}
		out = append(out, c)
	}
	if apps == 0 {
		return nil, fmt.Errorf("a pod needs an app container, got %q", strings.Join(args, " "))
	}
	return out, nil
}
