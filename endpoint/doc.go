// Package endpoint is the device manager's client for one registered device plugin instance.
//
// An [Endpoint] owns one gRPC connection to a plugin's unix socket. [Dial] connects and asks
// for the plugin's DevicePluginOptions, as the kubelet does during Register; [Endpoint.Run]
// streams ListAndWatch into a callback; [Endpoint.Allocate],
// [Endpoint.GetPreferredAllocation] and [Endpoint.PreStartContainer] are the unary RPCs the
// manager makes during admission and container start. [NewStopped] builds the placeholder the
// manager keeps for a resource restored from the checkpoint, and [Endpoint.Stop],
// [Endpoint.IsStopped] and [Endpoint.GracePeriodExpired] carry the stopped-endpoint grace
// state. The package knows nothing about pods, device sets or the checkpoint.
//
// Choices, and where they differ from the kubelet (v1.36):
//
//   - Wire behaviour is the kubelet's: insecure credentials, authority "localhost", a unix
//     socket dialer, a blocking connect retried with gRPC's backoff for up to 10s, one
//     ContainerAllocateRequest per Allocate, one ContainerPreferredAllocationRequest with the
//     size passed through, PreStartContainer bounded by 30s. The kubelet's error strings
//     (docs/behaviour.md#registration) are kept ("failed to dial device plugin: …",
//     "failed to get device plugin options: …", "endpoint <resourceName> has been stopped"),
//     with the cause wrapped by %w.
//   - grpc.DialContext with WithBlock is deprecated; the blocking dial is grpc.NewClient plus
//     Connect and WaitForStateChange until Ready, so a socket nobody listens on fails within
//     DialTimeout with the kubelet's text, "failed to dial device plugin: context deadline
//     exceeded"; the socket path and the last connect error are logged.
//   - A socket path where no file exists (checked with stat before dialling, every 100 ms
//     while dialling, and on each ENOENT from connect) fails at once with "failed to dial
//     device plugin: socket "<path>" does not exist" (ErrSocketMissing), where the kubelet
//     would wait the whole 10s: a plugin started before the manager registers a socket that
//     the start-up cleanup has just deleted, and must learn it while it can serve again and
//     retry. A plugin that sends Register before it creates its socket is refused for the
//     same reason; it must listen first, as the protocol expects.
//   - Deadlines: GetDevicePluginOptions is bounded (OptionsTimeout, 10s) because a plugin that
//     never answers would otherwise hang its Register call forever. Allocate and
//     GetPreferredAllocation keep the kubelet's "no deadline" by default; the recommended
//     bounds are RecommendedAllocateTimeout and RecommendedPreferredAllocationTimeout. Every
//     deadline is applied on top of the caller's context.
//   - Messages up to 64 MiB are accepted (gRPC's 4 MiB default cannot carry a ListAndWatch
//     list of 100,000 devices).
//   - Run takes a context (the kubelet's stream cannot be cancelled), and it does not mark the
//     endpoint stopped when the stream ends: the owner decides, so a replaced instance's
//     stream ending never disturbs its successor (upstream bug kubernetes#121994, fixed after
//     1.36 by keying instances by socket).
//   - Stop both stamps the stop time (first call only) and closes the connection, and a
//     stopped endpoint refuses every RPC with an error matching ErrStopped, including a call
//     interrupted by Stop while in flight.
//   - Time comes from the injected clock.Clock (stop time, grace); gRPC deadlines are real
//     time. Logs go to the injected klog.Logger with "resourceName" and "endpoint" keys.
//
// Concurrency: an Endpoint is safe for concurrent use. Its identity and connection are fixed at
// construction; the stop state has one mutex, never held across an RPC. The package starts no
// goroutines of its own beyond those gRPC runs for the connection, which Stop (or a failed
// Dial) closes.
package endpoint
