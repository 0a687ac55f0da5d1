package conformance

import "sort"

// check is one entry of the check list.
type check struct {
	id      int
	name    string
	title   string
	kubelet string
	run     func(*runner) (Status, []string)
}

// Checks lists the checks' IDs, names and titles in ID order, for documentation and --help.
func Checks() []Result {
	var out []Result
	for _, c := range checkOrder() {
		out = append(out, Result{ID: c.id, Name: c.name, Title: c.title, Kubelet: c.kubelet})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// checkOrder is the execution order. Checks 2 and 3 work on check 1's plugin process, which
// nothing has disturbed yet, and check 8 on the process check 4 restarted the manager under
// (each says so in its evidence); every other check starts from a state it sets up itself (a
// fresh plugin process and manager probe, or in check 5 a fresh process with no manager), so
// that no verdict carries another check's damage. Each check is declared beside its code.
func checkOrder() []check {
	return []check{
		registrationCheck,
		listAndWatchCheck,
		allocateCheck,
		duplicatesCheck,
		streamCloseCheck,
		managerRestartCheck,
		idleCPUCheck,
		healthCheck,
		managerAbsentCheck,
		sigtermCheck,
	}
}
