package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/kdm-project/kdm/agent/statusapi"
)

// printDisagreements writes, under `kdm get devices`' table, a condition line for each
// container whose checkpointed devices disagreed at start with kdm's own record of the pod,
// and what kdm did about it. Nothing when they agreed.
func printDisagreements(w io.Writer, found []statusapi.PageDisagreement) {
	if len(found) == 0 {
		return
	}
	fmt.Fprintf(w, "RecordsDisagree: at start the checkpoint disagreed with kdm's pod records for %d containers:\n", len(found))
	for _, d := range found {
		checkpointed := "none"
		if len(d.Checkpointed) > 0 {
			checkpointed = idList(d.Checkpointed)
		}
		line := fmt.Sprintf("  %s (%s) %s: recorded %s; checkpoint: %s", display(d.Pod), display(d.Container), display(d.Resource),
			idList(d.Recorded), checkpointed)
		if len(d.HeldByOthers) > 0 {
			others := make([]string, len(d.HeldByOthers))
			for i, p := range d.HeldByOthers {
				others[i] = display(p)
			}
			line += ", recorded devices under " + strings.Join(others, ", ")
		}
		if d.Kept {
			line += "; kept as recorded, given to no other pod"
		} else {
			line += "; the checkpoint was followed, as the kubelet does (--policy kdm keeps the recorded devices)"
		}
		fmt.Fprintln(w, line)
	}
}

// idList joins device IDs for a condition line.
func idList(ids []string) string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = display(id)
	}
	return strings.Join(out, ",")
}
