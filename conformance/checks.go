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

// checkOrder is the execution order: the checks that need the first plugin process come
// first, the ones that restart the manager or the plugin later, and the duplicate analysis,
// which reads every registration of the run, last. Each check is declared beside its code.
func checkOrder() []check {
	return []check{
		registrationCheck,
		listAndWatchCheck,
		allocateCheck,
		streamCloseCheck,
		managerRestartCheck,
		idleCPUCheck,
		healthCheck,
		managerAbsentCheck,
		sigtermCheck,
		duplicatesCheck,
	}
}
