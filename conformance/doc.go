// Package conformance is a sanity suite for device plugins, the plugin-side counterpart of
// csi-sanity: it starts a plugin command itself, plays the kubelet's device manager against
// it on a private device-plugin directory, and checks the behaviour the kubelet relies on,
// restarts above all (see Checks, and docs/conformance.md for the list and the JSON report).
//
// The manager side is a recording probe (registrar) rather than devicemanager.Manager:
// it serves Registration on kubelet.sock with the kubelet's validation and error strings and
// drives the plugin through the same endpoint package the manager uses (a synchronous dial
// and GetDevicePluginOptions inside Register, one ListAndWatch stream per registration, a
// replaced registration's stream left open, start-up removal of every socket), but it also
// keeps what the manager deliberately discards: each Register request with its own options and
// the process that made it (peer credentials), each duplicate call and each list's arrival
// time, and it can close a stream on demand. A watchdog follows the process tree of every
// plugin instance the suite starts (a restart loop's children included, registered or not) and
// every process that registered, and records each plugin process that dies without the suite
// ending it, by PID, with the stderr lines that arrived while it ran. Each check starts from a
// state it sets up itself (a fresh plugin process) or names the check it depends on; a check
// whose own step fails is ERROR, not FAIL.
//
// Run is safe to call from one goroutine per directory; every process and goroutine it
// starts has ended when it returns.
package conformance
