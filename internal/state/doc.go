// Package state is the device manager's pure core: the device sets of every resource, the
// per-container assignments, the reservations of allocations in flight, the init-container
// reuse pools, the containers found running at start, and when each resource's plugin went
// away. It makes the kubelet's decisions (which devices a container gets, when a request is
// refused, what capacity is reported, what is garbage-collected, what the checkpoint holds)
// and nothing else.
//
// A State does no I/O, reads no clock (callers pass the time), starts no goroutine and has
// no lock: its owner serialises every call. The device manager wraps it with the plugin
// endpoints, the RPCs, the checkpoint store and its mutex; the explorer (package explore)
// wraps the same State with simulated plugins, disks and crashes. Both therefore run the same
// rules, and the rules are tested here directly, from the scripts in testdata/state.
//
// Each operation has one method. What makes the device manager's checkpoint writes cheap is
// kept behind them: every assignment keeps its encoded checkpoint entry, the registered device
// lists stay sorted between snapshots (Prepared), and a restore keeps the entries the store
// read (Restore).
//
// The one call that leaves the core is Select's PreferredFunc, the plugin's
// GetPreferredAllocation: the owner may release its lock while it runs, and Select re-checks
// every device against the state as it is when the call returns.
package state
