package nvml

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/fsnotify/fsnotify"
)

// XIDEvent is a critical error NVML reported for a GPU.
type XIDEvent struct {
	UUID string
	XID  uint64
}

// EventSource delivers GPU health events until ctx ends. Next blocks for at most a short
// while and returns ok=false when nothing happened, so the caller can check ctx.
type EventSource interface {
	Next(ctx context.Context) (ev XIDEvent, ok bool, err error)
	Close()
}

// applicationXIDs are errors caused by the workload, not the GPU; NVIDIA's plugin ignores them
// too (graphics engine exception, GPU memory page fault, preemptive cleanup, ...).
var applicationXIDs = map[uint64]bool{13: true, 31: true, 43: true, 45: true, 68: true, 109: true}

// isCritical reports whether an XID should take the GPU out of service.
func isCritical(xid uint64) bool { return !applicationXIDs[xid] }

// nvmlEvents waits on an NVML event set for critical XID errors of every GPU.
type nvmlEvents struct {
	set nvml.EventSet
}

// newNVMLEvents registers every GPU for XID events. It fails when the library (or the mock)
// does not support events.
func newNVMLEvents(lib nvml.Interface, gpus []gpu) (*nvmlEvents, error) {
	set, ret := lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		return nil, errors.New("creating an NVML event set: " + nvml.ErrorString(ret))
	}
	for _, g := range gpus {
		d, ret := lib.DeviceGetHandleByUUID(g.UUID)
		if ret == nvml.SUCCESS {
			ret = d.RegisterEvents(nvml.EventTypeXidCriticalError, set)
		}
		if ret != nvml.SUCCESS {
			_ = set.Free()
			return nil, errors.New("registering " + g.UUID + " for XID events: " + nvml.ErrorString(ret))
		}
	}
	return &nvmlEvents{set: set}, nil
}

func (e *nvmlEvents) Next(ctx context.Context) (XIDEvent, bool, error) {
	if ctx.Err() != nil {
		return XIDEvent{}, false, nil
	}
	data, ret := e.set.Wait(1000)
	switch {
	case ret == nvml.ERROR_TIMEOUT:
		return XIDEvent{}, false, nil
	case ret != nvml.SUCCESS:
		return XIDEvent{}, false, errors.New("waiting for NVML events: " + nvml.ErrorString(ret))
	case data.EventType != nvml.EventTypeXidCriticalError:
		return XIDEvent{}, false, nil
	}
	uuid, ret := data.Device.GetUUID()
	if ret != nvml.SUCCESS {
		return XIDEvent{}, false, errors.New("XID event for a GPU whose UUID is unknown: " + nvml.ErrorString(ret))
	}
	return XIDEvent{UUID: uuid, XID: data.EventData}, true, nil
}

func (e *nvmlEvents) Close() { _ = e.set.Free() }

// watchEvents marks GPUs unhealthy on critical XIDs until ctx ends.
func (p *Plugin) watchEvents(ctx context.Context, src EventSource) {
	defer src.Close()
	for ctx.Err() == nil {
		ev, ok, err := src.Next(ctx)
		if err != nil {
			p.log.Error(err, "GPU health events stopped; health is no longer watched")
			return
		}
		if !ok {
			continue
		}
		if !isCritical(ev.XID) {
			p.log.V(2).Info("Ignored application XID", "deviceID", ev.UUID, "xid", ev.XID)
			continue
		}
		if err := p.MarkUnhealthy(ev.UUID, "XID "+strconv.FormatUint(ev.XID, 10)); err != nil {
			p.log.Error(err, "XID event for an unknown GPU", "deviceID", ev.UUID, "xid", ev.XID)
		}
	}
}

// watchControlDir applies the health control directory: a file named after a GPU's UUID
// holding "Unhealthy" takes it out of service; "Healthy" or removing the file brings it back.
// Dot-files are ignored. Existing files are applied first.
func (p *Plugin) watchControlDir(ctx context.Context, dir string, w *fsnotify.Watcher) {
	defer func() { _ = w.Close() }()
	apply := func(name string) {
		base := filepath.Base(name)
		if strings.HasPrefix(base, ".") {
			return
		}
		if _, known := p.byUUID[base]; !known {
			return
		}
		b, err := os.ReadFile(filepath.Join(dir, base))
		health := strings.TrimSpace(string(b))
		if err != nil || strings.EqualFold(health, "Healthy") {
			_ = p.MarkHealthy(base)
			return
		}
		_ = p.MarkUnhealthy(base, "health control file")
	}
	if entries, err := os.ReadDir(dir); err == nil {
		for _, e := range entries {
			apply(e.Name())
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.Events:
			if !ok {
				return
			}
			apply(ev.Name)
		case err, ok := <-w.Errors:
			if !ok {
				return
			}
			p.log.Error(err, "Health control directory watch error", "path", dir)
		}
	}
}
