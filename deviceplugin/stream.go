package deviceplugin

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// stream is one open ListAndWatch call. Its queue is filled under p.mu by pushLocked and
// drained by the handler goroutine, which sends outside the lock: a slow client delays only
// its own stream, and every list is delivered in order.
type stream struct {
	pending [][]*pluginapi.Device // guarded by Plugin.mu; lists are immutable and may be shared
	wake    chan struct{}         // capacity 1: "pending may be non-empty"
}

// pushLocked queues the current list on every open stream. The list and its devices are
// never modified once published (SetDevices and SetHealth build new ones), so every stream
// shares it and gRPC marshals it concurrently without copies. p.mu must be held.
func (p *Plugin) pushLocked() {
	for st := range p.streams {
		st.pending = append(st.pending, p.devices)
		select {
		case st.wake <- struct{}{}:
		default:
		}
	}
}

// serveStream runs one ListAndWatch call: the current list first, then every update, until
// the stream's context ends (the client went away, or a Config.StreamInterceptor ended it:
// the context's error as a status) or Stop (nil, i.e. a clean end of stream). An ended
// context wins over pending updates.
func (p *Plugin) serveStream(srv pluginapi.DevicePlugin_ListAndWatchServer) error {
	st := &stream{wake: make(chan struct{}, 1)}
	p.mu.Lock()
	if p.state != stateRunning {
		p.mu.Unlock()
		return status.Error(codes.Unavailable, "device plugin is not running")
	}
	life := p.ctx
	st.pending = [][]*pluginapi.Device{p.devices}
	p.streams[st] = struct{}{}
	p.streamsOpened++
	n := p.streamsOpened
	p.mu.Unlock()
	log := p.log.WithValues("stream", n)
	log.V(2).Info("ListAndWatch stream opened")
	defer func() {
		p.mu.Lock()
		delete(p.streams, st)
		p.mu.Unlock()
		log.V(2).Info("ListAndWatch stream closed")
	}()
	ended := func() error { return status.FromContextError(srv.Context().Err()).Err() }
	for {
		if srv.Context().Err() != nil {
			return ended()
		}
		p.mu.Lock()
		batch := st.pending
		st.pending = nil
		p.mu.Unlock()
		for _, devs := range batch {
			if err := srv.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
				return err
			}
		}
		select {
		case <-st.wake:
		case <-srv.Context().Done():
			return ended()
		case <-life.Done():
			return nil
		}
	}
}
