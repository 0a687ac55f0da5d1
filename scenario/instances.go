package scenario

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// The commands about one instance of a plugin among several: what a rolling update does step
// by step, and a plugin that registers twice on one socket. What the manager does with them
// is what the policies differ on (docs/restart-stories.md).

// forget removes the instance serving socket from the plugin's running instances and
// returns it (nil if none serves it). The caller stops it.
func (r *Runner) forget(p *plugin, socket string) *instance {
	i := slices.IndexFunc(p.running, func(in instance) bool { return in.socket == socket })
	if i < 0 {
		return nil
	}
	in := p.running[i]
	p.running = slices.Delete(p.running, i, i+1)
	return &in
}

// stopInstance is `plugin stop-instance NAME SOCKET`: the instance serving SOCKET exits, its
// streams ending, while the plugin's other instances keep running. It waits until the manager
// has seen the stream end (the instance it served is no longer served; a replaced instance's
// stream is no longer open) and reports who serves the resource now.
func (r *Runner) stopInstance(p *plugin, name, socket string) ([]string, error) {
	if p == nil || socket == "" {
		return nil, fmt.Errorf("plugin stop-instance needs a running plugin and one of its sockets")
	}
	res := r.resource(name)
	served, replaced := r.endpointOf(res)
	in := r.forget(p, socket)
	if in == nil {
		return nil, fmt.Errorf("plugin %q has no running instance on %s", name, socket)
	}
	if served == socket {
		// The older connections to the socket (`plugin register-again`) end first, as the
		// simulator takes them: see stopInOrder.
		if n := in.inst.DropOlderStreams(); n > 0 {
			if err := r.waitReplacedStreamsClosed(res, max(0, replaced-n)); err != nil {
				return nil, err
			}
		}
	}
	in.inst.DropStreams()
	in.inst.Stop()
	var err error
	if served == socket {
		// The manager has decided once another instance serves the resource, or none does
		// and the devices are unhealthy: between the stream's end and that decision the
		// instance reads as stopped while its devices still count.
		err = r.waitEndpoint(res, socket+"'s stream end", func(s string, _ int) bool {
			if s == "" {
				_, a := r.counts(res)
				return a <= 0
			}
			return s != socket
		})
	} else {
		err = r.waitEndpoint(res, socket+"'s stream end", func(_ string, n int) bool { return n < replaced })
	}
	if err != nil {
		return nil, err
	}
	now, _ := r.endpointOf(res)
	c, a := r.counts(res)
	if now == "" {
		return []string{fmt.Sprintf("instance %s exited; no instance serves %s: its devices are unhealthy, capacity kept for the grace period (capacity %d, allocatable %d)",
			socket, res, c, a)}, nil
	}
	return []string{fmt.Sprintf("instance %s exited; %s serves %s (capacity %d, allocatable %d)", socket, now, res, c, a)}, nil
}

// registerAgain is `plugin register-again NAME`: the plugin's newest instance sends a second
// Register for the socket it already serves, as a plugin does that registers twice when it
// starts (ROCm's). An accepted Register dials the socket again and the new connection serves
// the resource; a refused one is reported with its gRPC code and message, the plugin
// directory written as <plugin dir>.
func (r *Runner) registerAgain(p *plugin, name string) ([]string, error) {
	if p == nil || p.newest() == nil {
		return nil, fmt.Errorf("plugin %q is not running", name)
	}
	socket, res := p.newest().socket, r.resource(name)
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+r.m.SocketPath(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("connecting to kubelet.sock: %w", err)
	}
	defer func() { _ = conn.Close() }()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: socket, ResourceName: res, Options: &pluginapi.DevicePluginOptions{}})
	if err != nil {
		st := status.Convert(err)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("second Register on %s: %w", socket, err)
		}
		served, _ := r.endpointOf(res)
		c, a := r.counts(res)
		return []string{
			fmt.Sprintf("second Register on %s refused (%s): %s", socket, st.Code(), strings.ReplaceAll(st.Message(), r.dir, "<plugin dir>")),
			fmt.Sprintf("the first connection to %s keeps serving %s (capacity %d, allocatable %d)", served, res, c, a),
		}, nil
	}
	if err := r.waitEndpoint(res, "the second connection's first list", func(s string, _ int) bool { return s == socket }); err != nil {
		return nil, err
	}
	_, open := r.endpointOf(res)
	c, a := r.counts(res)
	return []string{
		fmt.Sprintf("second Register on %s accepted: a new connection to it serves %s", socket, res),
		fmt.Sprintf("the first connection's stream stays open (%d replaced stream(s) open; capacity %d, allocatable %d)", open, c, a),
	}, nil
}

// arg0 returns the first of args, or "".
func arg0(args []string) string {
	if len(args) == 0 {
		return ""
	}
	return args[0]
}
