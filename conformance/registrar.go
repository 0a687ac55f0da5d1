package conformance

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/devicemanager"
	"github.com/kdm-project/kdm/endpoint"
	"github.com/kdm-project/kdm/internal/resourcename"
)

// kubeletSocketName is the registration socket's name inside the plugin directory.
const kubeletSocketName = "kubelet.sock"

// deviceList is one ListAndWatch message as the probe received it.
type deviceList struct {
	at      time.Time
	devices []*pluginapi.Device
}

// registration is one Register call the probe served, with what followed it: the options the
// plugin answered on GetDevicePluginOptions and the lists of the stream the probe opened.
type registration struct {
	at         time.Time
	generation int // the probe's start count when the call arrived
	process    int // the plugin process's start count when the call arrived
	pid        int // the process that called (SO_PEERCRED), 0 if unknown
	caller     procID
	req        *pluginapi.RegisterRequest
	socket     string // resolved socket path ("" when the endpoint was refused)
	err        error  // what the probe answered; nil for an accepted registration

	// Guarded by registrar.mu.
	ep        *endpoint.Endpoint
	opts      *pluginapi.DevicePluginOptions
	lists     []deviceList
	streamEnd time.Time
	streamErr error
	closedAt  time.Time // when the probe closed the stream on purpose (check stream-close)
}

// registrar is the manager side the checks drive: it serves Registration on kubelet.sock in
// dir the way the kubelet's device manager does (same validation, a synchronous dial and
// GetDevicePluginOptions, one ListAndWatch stream per accepted registration, a replaced
// registration's stream left open) and records everything a plugin does, which the device
// manager proper neither keeps nor exposes (the Register request's own options, every
// duplicate call, each list's arrival time). start and stop replay the kubelet's start-up and
// shutdown on the directory, so a stop followed by a start is a manager restart as plugins see
// it. It is safe for concurrent use; mu is never held across an RPC.
type registrar struct {
	dir     string
	log     klog.Logger
	epCfg   endpoint.Config
	process func() int // the plugin's current process start count

	life       sync.Mutex // serialises start and stop
	server     *grpc.Server
	cancel     context.CancelFunc
	generation int
	wg         sync.WaitGroup

	mu      sync.Mutex
	regs    []*registration
	changed chan struct{} // closed and replaced on every change to regs or their lists
	runCtx  context.Context
	closed  bool // set by stop before it waits: no stream goroutine may start after it
}

func newRegistrar(dir string, log klog.Logger, epCfg endpoint.Config, process func() int) *registrar {
	return &registrar{dir: dir, log: log, epCfg: epCfg, process: process, changed: make(chan struct{})}
}

// start is the kubelet's device-manager start on the directory: create it, delete every socket
// in it (the plugins' sockets included, which is how plugins learn of a restart), then serve
// Registration on a freshly created kubelet.sock. It returns when kubelet.sock exists.
func (r *registrar) start() error {
	r.life.Lock()
	defer r.life.Unlock()
	if r.server != nil {
		return errors.New("registration probe already running")
	}
	if err := os.MkdirAll(r.dir, 0o750); err != nil {
		return fmt.Errorf("creating device plugin directory: %w", err)
	}
	if err := devicemanager.RemovePluginSockets(r.dir); err != nil {
		return fmt.Errorf("cleaning up device plugin directory %s: %w", r.dir, err)
	}
	path := filepath.Join(r.dir, kubeletSocketName)
	_ = os.Remove(path)
	lis, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", path, err)
	}
	lis = peerListener{lis}
	ctx, cancel := context.WithCancel(context.Background())
	r.generation++
	r.cancel = cancel
	r.server = grpc.NewServer()
	pluginapi.RegisterRegistrationServer(r.server, &registrationService{r: r, generation: r.generation})
	r.mu.Lock()
	r.runCtx, r.closed = ctx, false
	r.mu.Unlock()
	server := r.server
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		_ = server.Serve(lis)
	}()
	return nil
}

// stop is the kubelet's device-manager stop: close every plugin connection (ending its
// stream), stop serving (which unlinks kubelet.sock) and wait for every goroutine. It is a
// no-op when not running.
func (r *registrar) stop() {
	r.life.Lock()
	defer r.life.Unlock()
	if r.server == nil {
		return
	}
	r.mu.Lock()
	r.closed = true
	var eps []*endpoint.Endpoint
	for _, reg := range r.regs {
		if reg.ep != nil {
			eps = append(eps, reg.ep)
		}
	}
	r.mu.Unlock()
	for _, ep := range eps {
		ep.Stop()
	}
	r.cancel()
	r.server.Stop()
	r.wg.Wait()
	r.server, r.cancel = nil, nil
	_ = os.Remove(filepath.Join(r.dir, kubeletSocketName))
}

type registrationService struct {
	pluginapi.UnimplementedRegistrationServer
	r          *registrar
	generation int
}

// Register validates the request as the kubelet does (API version, extended resource name),
// checks that the endpoint names a socket inside the directory, dials it and asks for its
// options before answering, then streams its devices. Every call is recorded.
func (s *registrationService) Register(ctx context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	r := s.r
	reg := &registration{at: time.Now(), generation: s.generation, process: r.process(), pid: peerPID(ctx),
		req: proto.Clone(req).(*pluginapi.RegisterRequest)}
	if st, ok := readStat(reg.pid); reg.pid != 0 && ok {
		reg.caller = procID{pid: reg.pid, pgrp: st.pgrp, startTime: st.startTime}
	}
	log := r.log.WithValues("resourceName", req.ResourceName, "endpoint", req.Endpoint)
	reg.err = validateRegister(req)
	if reg.err == nil {
		reg.socket, reg.err = socketInside(r.dir, req.Endpoint)
	}
	var ep *endpoint.Endpoint
	if reg.err == nil {
		ep, reg.err = endpoint.Dial(ctx, req.ResourceName, reg.socket, r.epCfg)
	}
	r.mu.Lock()
	runCtx := r.runCtx
	if reg.err == nil && r.closed {
		ep.Stop()
		reg.err = errors.New("device manager is not running")
	}
	if reg.err == nil {
		reg.ep, reg.opts = ep, ep.Options()
		r.wg.Add(1) // under mu before closed is set, so before stop's Wait
	}
	r.regs = append(r.regs, reg)
	r.signalLocked()
	r.mu.Unlock()
	if reg.err != nil {
		log.Info("Refused registration", "err", reg.err)
		return &pluginapi.Empty{}, reg.err
	}
	log.V(2).Info("Registered device plugin", "path", reg.socket)
	go func() {
		defer r.wg.Done()
		err := ep.Run(runCtx, func(devs []*pluginapi.Device) {
			r.mu.Lock()
			defer r.mu.Unlock()
			reg.lists = append(reg.lists, deviceList{at: time.Now(), devices: devs})
			r.signalLocked()
		})
		ep.Stop()
		r.mu.Lock()
		reg.streamEnd, reg.streamErr = time.Now(), err
		r.signalLocked()
		r.mu.Unlock()
	}()
	return &pluginapi.Empty{}, nil
}

func (r *registrar) signalLocked() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// procID identifies a process: its PID, process group and start time (a reused PID has
// another start time).
type procID struct {
	pid, pgrp int
	startTime int64
}

// callers returns the distinct processes that made Register calls, in the order of their
// first call; a caller that had ended before the call was served is left out.
func (r *registrar) callers() []procID {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []procID
	seen := map[procID]bool{}
	for _, reg := range r.regs {
		if reg.caller.pid != 0 && !seen[reg.caller] {
			seen[reg.caller] = true
			out = append(out, reg.caller)
		}
	}
	return out
}

// snapshot is a read-only view of the registrations, taken under mu. The registrations are
// shared: callers read their fields only through snapshot-time copies (see view).
func (r *registrar) snapshot() []regView {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]regView, len(r.regs))
	for i, reg := range r.regs {
		out[i] = reg.viewLocked(i)
	}
	return out
}

// regView is a copy of one registration's state.
type regView struct {
	index      int
	at         time.Time
	generation int
	process    int
	pid        int
	req        *pluginapi.RegisterRequest
	socket     string
	err        error
	opts       *pluginapi.DevicePluginOptions
	lists      []deviceList
	streamEnd  time.Time
	streamErr  error
	closedAt   time.Time
	ep         *endpoint.Endpoint
}

func (reg *registration) viewLocked(i int) regView {
	return regView{index: i, at: reg.at, generation: reg.generation, process: reg.process, pid: reg.pid, req: reg.req,
		socket: reg.socket, err: reg.err, opts: reg.opts, lists: append([]deviceList(nil), reg.lists...),
		streamEnd: reg.streamEnd, streamErr: reg.streamErr, closedAt: reg.closedAt, ep: reg.ep}
}

// accepted reports whether the probe accepted the registration.
func (v regView) accepted() bool { return v.err == nil }

// latest returns the last device list, or nil.
func (v regView) latest() []*pluginapi.Device {
	if len(v.lists) == 0 {
		return nil
	}
	return v.lists[len(v.lists)-1].devices
}

// closeStream closes the connection of registration i, ending its ListAndWatch stream from the
// manager's side, and remembers that the probe did it.
func (r *registrar) closeStream(i int) {
	r.mu.Lock()
	reg := r.regs[i]
	reg.closedAt = time.Now()
	ep := reg.ep
	r.mu.Unlock()
	if ep != nil {
		ep.Stop()
	}
}

// waitFor blocks until cond holds on a snapshot, or timeout passes or ctx ends. It returns the
// last snapshot and whether cond held.
func (r *registrar) waitFor(ctx context.Context, timeout time.Duration, cond func([]regView) bool) ([]regView, bool) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		ch := r.changed
		r.mu.Unlock()
		snap := r.snapshot()
		if cond(snap) {
			return snap, true
		}
		select {
		case <-ch:
		case <-deadline.C:
			return r.snapshot(), cond(r.snapshot())
		case <-ctx.Done():
			return snap, false
		}
	}
}

// validateRegister applies the kubelet's checks on a Register request, with its error strings.
func validateRegister(req *pluginapi.RegisterRequest) error {
	if req.Version != pluginapi.Version {
		return fmt.Errorf("requested API version %q is not supported by kubelet. Supported version is %q",
			req.Version, []string{pluginapi.Version})
	}
	if !isExtendedResourceName(req.ResourceName) {
		return fmt.Errorf("the ResourceName %q is invalid", req.ResourceName)
	}
	return nil
}

// isExtendedResourceName is the kubelet's rule for a device-plugin resource name.
func isExtendedResourceName(name string) bool { return resourcename.IsExtended(name) }

// socketInside resolves a Register request's endpoint against dir and requires it to be a plain
// relative name of a socket that exists inside dir, symlinks resolved.
func socketInside(dir, ep string) (string, error) {
	if ep == "" || !filepath.IsLocal(ep) {
		return "", fmt.Errorf("invalid endpoint %q: must name a socket inside %s", ep, dir)
	}
	realDir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", fmt.Errorf("resolving %s: %w", dir, err)
	}
	p := filepath.Join(dir, ep)
	fi, err := os.Stat(p)
	if err != nil {
		return "", fmt.Errorf("endpoint %q: no socket at %s: %w", ep, p, err)
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return "", fmt.Errorf("endpoint %q: %s is not a socket (mode %v)", ep, p, fi.Mode())
	}
	resolved, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", fmt.Errorf("endpoint %q: resolving %s: %w", ep, p, err)
	}
	if rel, err := filepath.Rel(realDir, resolved); err != nil || !filepath.IsLocal(rel) {
		return "", fmt.Errorf("endpoint %q resolves to %s, outside %s", ep, resolved, dir)
	}
	return resolved, nil
}
