// Package scenario replays restart-semantics stories — kubelet restarts, node reboots, plugin
// restarts and rolling updates, corrupt and legacy checkpoints, the grace period — against the
// real device manager and real device plugins over unix sockets, with a fake clock.
//
// Scripts use the github.com/cockroachdb/datadriven format (testdata/scenarios/*.txt): each
// command is followed by the timeline it produced. TestScenarios runs every script under every
// policy (Policies: each supported kubelet minor, then kdm) in lockstep and prints one outcome
// when all agree, each policy's lines under its name when they differ; `go test ./scenario
// -rewrite` refreshes the files.
// After every command the runner checks that no device is held by two containers (a regular
// init container shares with its own pod's later containers, by design).
//
// `kdm scenario` prints a script's timeline (--policy), every policy's timeline side by side,
// a column per policy (--compare), or an SVG with a lane per resource and policy (--svg).
//
// Admissions run in their own goroutines; the runner reports a deferred admission as waiting
// (the manager's OnAdmissionDeferred hook) and its outcome once the plugin returns. On a
// kubelet restart, live plugins register again only after the existing pods have been
// re-admitted — the window in which the kubelet's failures happen — so timelines are
// deterministic.
package scenario
