package devicemanager

import (
	"errors"
	"fmt"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Bounds on the Register calls served at once. A Register holds a dial of up to the dial
// timeout plus GetDevicePluginOptions; a plugin restarting needs one or two, so anything
// beyond these is a flood (or a broken plugin looping) and is refused at once.
const (
	// maxRegistersPerResource is how many Register calls for one resource may run at once.
	maxRegistersPerResource = 2
	// maxRegistersTotal is how many Register calls may run at once, all resources together.
	maxRegistersTotal = 32
)

// ErrSocketInUse is wrapped by the error that refuses a registration whose socket already
// serves another resource through a live endpoint.
var ErrSocketInUse = errors.New("plugin socket already serves another resource")

// socketInUse refuses registering resource on socket, which serves owner through a live
// endpoint. It matches ErrSocketInUse with errors.Is.
type socketInUse struct {
	socket, owner, resource string
}

func socketInUseError(socket, owner, resource string) error {
	return &socketInUse{socket: socket, owner: owner, resource: resource}
}

func (e *socketInUse) Error() string {
	return fmt.Sprintf("%v: socket %s serves resource %q; refusing to register resource %q on it",
		ErrSocketInUse, e.socket, e.owner, e.resource)
}

func (e *socketInUse) Is(target error) bool { return target == ErrSocketInUse }

// registerLimiter counts the Register calls in flight, per resource and in all, and refuses
// one beyond the bounds. The zero value is ready to use with the default bounds. It is safe
// for concurrent use; nothing blocks.
type registerLimiter struct {
	maxPerResource, maxTotal int // zero: the defaults above

	mu          sync.Mutex
	total       int
	perResource map[string]int // only resources with calls in flight, so it stays small
}

// acquire admits one Register call for resource, or returns a codes.ResourceExhausted status
// error naming the bound that was hit. On success the caller must call release exactly once.
func (l *registerLimiter) acquire(resource string) (release func(), err error) {
	perResource, total := l.maxPerResource, l.maxTotal
	if perResource <= 0 {
		perResource = maxRegistersPerResource
	}
	if total <= 0 {
		total = maxRegistersTotal
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.perResource[resource] >= perResource {
		return nil, status.Errorf(codes.ResourceExhausted,
			"%d registrations of resource %q are already in progress; retry after they finish", perResource, resource)
	}
	if l.total >= total {
		return nil, status.Errorf(codes.ResourceExhausted,
			"%d device plugin registrations are already in progress; retry later", total)
	}
	if l.perResource == nil {
		l.perResource = map[string]int{}
	}
	l.perResource[resource]++
	l.total++
	var once sync.Once
	return func() { once.Do(func() { l.release(resource) }) }, nil
}

func (l *registerLimiter) release(resource string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	if l.perResource[resource] <= 1 {
		delete(l.perResource, resource)
		return
	}
	l.perResource[resource]--
}

// socketOwnerLocked returns the resource, other than resource, whose current endpoint is live
// (connected and not stopped) on socket, or "" if there is none. Callers hold mu.
func (m *Manager) socketOwnerLocked(resource, socket string) string {
	for res, info := range m.endpoints {
		if res == resource || info.ep == nil || info.ep.SocketPath() != socket {
			continue
		}
		if !info.ep.IsStopped() {
			return res
		}
	}
	return ""
}
