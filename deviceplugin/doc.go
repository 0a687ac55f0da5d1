// Package deviceplugin is the plugin side of the device-plugin protocol: a small SDK that
// serves the v1beta1 DevicePlugin service on a unix socket, registers with the kubelet (or
// kdm), pushes device updates over ListAndWatch, and registers again when the kubelet
// restarts. kdm's reference GPU plugin and its test double (deviceplugin/plugintest) are
// built on it; plugin authors can use it as is. It never imports the manager side.
//
// # Lifecycle
//
// New validates a Config (Config.Validate); Start serves and registers; Stop tears everything down and joins
// every goroutine; Run is Start, wait for ctx, Stop. A Plugin is single-use: a "plugin
// restart" is Stop followed by a new Plugin on the same socket name. Stop is the "plugin
// exits" fault.
//
// # Registration modes
//
//   - RegisterWithKubelet (default): one Register call on kubelet.sock at Start, with
//     Version "v1beta1", Endpoint = the socket's file name, the resource name and Options.
//     A refusal fails Start.
//   - PluginWatcher: the pluginregistration v1 service (GetInfo, NotifyRegistrationStatus)
//     is served on WatcherDir/SocketName; GetInfo names the DevicePlugin socket by its
//     absolute path. A positive NotifyRegistrationStatus counts as a registration.
//   - NoRegistration: serve only; the caller registers by hand.
//
// # Restart detection
//
// Like real plugins, we infer a kubelet restart from file events (fsnotify on PluginDir),
// because the kubelet at start-up deletes every socket in the device-plugin directory and
// then creates kubelet.sock afresh:
//   - our socket deleted → listen on it again (the kubelet dials it when we re-register);
//   - kubelet.sock created → register again, retrying with a doubling backoff
//     (RetryBackoff..MaxRetryBackoff, on Config.Clock so tests can use a fake clock) until
//     it works or the plugin stops. Every attempt first checks that our socket is served.
//
// In PluginWatcher mode, re-creating our socket also re-creates the registry socket, so the
// watcher sees a fresh socket and connects again. A kubelet.sock that appears while Start is
// registering may cause one extra, harmless, registration. The file watcher runs from the
// start of Start, so a socket deleted while the first Register still waits for kubelet.sock
// is served again at once; and every Register is sent only once our socket is served.
//
// Socket files are tracked by identity (inode): the plugin only re-creates a socket that is
// gone and only deletes a file it created, never one another process put at the same path.
// The one exception is at Start (and when our socket is re-created): a socket already at the
// path is probed with a connect bounded by a second, and removed only when it refuses the
// connection, i.e. when the process that made it has exited. A socket some process still
// accepts on makes Start fail with ErrSocketInUse (two plugins cannot share a path: give
// each its own SocketName), and a file that is not a socket, a symbolic link included, makes
// it fail with ErrNotSocket; neither is touched.
//
// # Concurrency
//
// One mutex guards the plugin's state and is never held across an RPC or a stream Send.
// Each ListAndWatch stream has its own queue: SetDevices and SetHealth queue a copy of the
// whole list on every open stream and return at once; the stream's handler sends the lists
// in order, none coalesced. The plugin keeps nothing per request, so its memory stays flat
// however many calls it answers.
//
// # Extension points
//
// Config.UnaryInterceptor and Config.StreamInterceptor wrap the RPCs the plugin serves, and
// Config.RegisterInterceptor the Register calls it makes; Done tells when the plugin begins
// to stop. They carry logging, metrics or access checks. The test double in
// deviceplugin/plugintest is built on them alone: it records the calls, lets tests wait for
// them and scripts faults (hangs, errors, dropped streams, a plugin that registers twice or
// exits when its stream is closed), for testing managers.
//
// # Choices
//
//   - Config.Options is a pointer: protobuf messages must not be copied by value (go vet's
//     copylocks check rejects a Config holding one by value).
//   - The default Allocate refuses unknown IDs (InvalidArgument), as real plugins do, and
//     otherwise returns only the env KDM_VISIBLE_DEVICES=<ids joined by ",">.
//   - The default GetPreferredAllocation takes must-include IDs first, then available IDs
//     in order, up to the requested size. The default PreStartContainer returns an empty
//     response.
//   - Register waits for kubelet.sock to accept connections (gRPC wait-for-ready) within
//     RegisterTimeout (10s), like the kubelet's own stub plugin's blocking dial, but tries
//     to connect at least every 200 ms instead of gRPC's default backoff (1 s growing to
//     minutes), so a kubelet that starts while we wait is found at once.
//   - Config.Validate refuses what the kubelet would refuse or what could never work (a
//     resource name that is not an extended resource name, a socket path over 107 bytes,
//     negative durations) and never corrects a value. Version alone is sent as given, so
//     tests can exercise a manager's version check.
//   - The zero Logger means klog.Background(); log keys follow the kubelet's
//     ("resourceName", "endpoint", "path", "deviceID").
package deviceplugin
