// Package explore is a deterministic simulator of a node around the device manager's pure
// core (package internal/state) and its policies. It searches the interleavings that
// matter for restart semantics: pods arriving and leaving, plugins that register, fail,
// flap, register twice or never come back, manager crashes at every checkpoint write and
// every plugin call, node reboots, lost checkpoints and the grace period on a simulated
// clock. After every step it checks the invariants (see Invariant) and reports a violation
// as a shrunk script in the scenario language (package scenario), so that `kdm scenario`
// replays it against the real manager.
//
// Nothing here opens a socket, starts a goroutine or sleeps: a run is a function of its
// seed (random mode) or of its choice sequence (exhaustive mode), and is replayed exactly.
//
// The simulated manager drives the same state.State as devicemanager.Manager and runs the
// same allocation steps in the same order, state.ContainerSteps, which both share: garbage
// collection before each container's first device resource, selection with the plugin's
// preference, Allocate, commit and a durable checkpoint write, releasing everything on a
// failure. The simulator does each step's side effect itself (simulated plugin calls, waits on
// the simulated clock, the write to the simulated disk) and stops between steps, where a crash
// or other work may come in. One difference stays: the simulator writes what garbage
// collection removed at once, where the manager folds that write into the allocation's own.
// On restart, the checkpoint (or, when it is unusable, the embedder's own records) is restored
// and the pods are admitted again while their plugins re-register, in any order. Deferred
// admission (Policy.DeferAdmission) waits for a plugin as the manager does, with the deferral
// timeout and the grace period on the simulated clock.
package explore
