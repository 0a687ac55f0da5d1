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
	dropped chan struct{}         // closed by DropStreams
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
// the client goes away (its context error; counted in Calls.StreamsClosedByManager, and
// fatal under the ExitOnStreamClose fault), DropStreams (Unavailable) or Stop (nil, i.e. a
// clean end of stream).
func (p *Plugin) serveStream(srv pluginapi.DevicePlugin_ListAndWatchServer) error {
	st := &stream{wake: make(chan struct{}, 1), dropped: make(chan struct{})}
	p.mu.Lock()
	if p.state != stateRunning {
		p.mu.Unlock()
		return status.Error(codes.Unavailable, "device plugin is not running")
	}
	life := p.ctx
	st.pending = [][]*pluginapi.Device{p.devices}
	p.streams[st] = struct{}{}
	p.calls.ListAndWatch++
	n := p.calls.ListAndWatch
	p.notifyLocked()
	p.mu.Unlock()
	log := p.log.WithValues("stream", n)
	log.V(2).Info("ListAndWatch stream opened")
	defer func() {
		p.mu.Lock()
		delete(p.streams, st)
		p.notifyLocked()
		p.mu.Unlock()
		log.V(2).Info("ListAndWatch stream closed")
	}()
	errDropped := status.Error(codes.Unavailable, "ListAndWatch stream dropped by the device plugin")
	for {
		select {
		case <-st.dropped: // a drop wins over pending updates
			return errDropped
		default:
		}
		p.mu.Lock()
		batch := st.pending
		st.pending = nil
		p.mu.Unlock()
		for _, devs := range batch {
			if err := srv.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
				if srv.Context().Err() != nil {
					p.streamClosedByManager()
				}
				return err
			}
		}
		select {
		case <-st.wake:
		case <-st.dropped:
			return errDropped
		case <-srv.Context().Done():
			p.streamClosedByManager() // does nothing if the plugin is stopping
			return status.FromContextError(srv.Context().Err()).Err()
		case <-life.Done():
			return nil
		}
	}
}

// DropStreams ends every open ListAndWatch stream with an Unavailable error, as a plugin
// crash would look to the manager, while the plugin keeps serving: a manager that dials
// again gets a fresh stream.
func (p *Plugin) DropStreams() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for st := range p.streams {
		close(st.dropped)
		delete(p.streams, st)
	}
	p.log.V(2).Info("Dropped every ListAndWatch stream")
}

// OpenStreams is the number of ListAndWatch streams open right now.
func (p *Plugin) OpenStreams() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.streams)
}
