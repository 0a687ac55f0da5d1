package explore

import (
	"fmt"
	"strings"

	"github.com/kdm-project/kdm/scenario"
)

// Script prints steps in the scenario language (package scenario): one command per event,
// each followed by "----" and a blank line for `kdm scenario` or `go test ./scenario
// -rewrite` to fill in. What the language cannot say (a plugin's fault, a device appearing,
// the order of work inside a restart) is kept as a "# explore:" comment, so the script still
// tells the whole run.
func Script(steps []Step, origin string, v *Violation) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Found by %s.\n", origin)
	if v != nil {
		fmt.Fprintf(&b, "# Violation: %s\n", v.Error())
	}
	b.WriteString("\nkubelet start\n----\n\n")
	crashes := crashedAdmissions(steps)
	for i, s := range steps {
		if crashes[i] == -1 {
			continue // written as the admission's crash=allocate
		}
		if s.Event == nil {
			if !strings.HasPrefix(s.Task, "admit ") && s.Task != "drain" {
				fmt.Fprintf(&b, "# explore: %s\n\n", s.Task)
			}
			continue
		}
		line, comment := s.Event.scenarioLine()
		if crashes[i] == 1 {
			line += " " + scenario.CrashAtAllocate
			comment = strings.TrimPrefix(strings.TrimSpace(comment+"; the manager crashes while its Allocate call is in flight"), "; ")
		}
		if comment != "" {
			fmt.Fprintf(&b, "# explore: %s\n", comment)
		}
		if line != "" {
			fmt.Fprintf(&b, "%s\n----\n\n", line)
		} else if comment != "" {
			b.WriteString("\n")
		}
	}
	b.WriteString("allocations\n----\n")
	return b.String()
}

// scenarioLine is the event's command in the scenario language, and a comment for what the
// language cannot express.
func (e *Event) scenarioLine() (line, comment string) {
	switch e.Kind {
	case "plugin-start":
		line = strings.TrimSpace("plugin start " + e.Name + " " + strings.Join(e.Args, " "))
		if f := e.Faults.String(); f != "" {
			comment = fmt.Sprintf("the %s plugin misbehaves: %s", e.Name, f)
		}
	case "plugin-stop":
		line = "plugin stop " + e.Name
	case "plugin-rolling-update":
		line = "plugin rolling-update " + e.Name
	case "plugin-add-instance":
		line = "plugin add-instance " + e.Name
	case "plugin-stop-instance":
		line = "plugin stop-instance " + e.Name + " " + strings.Join(e.Args, " ")
	case "plugin-register-again":
		line = "plugin register-again " + e.Name
	case "device-unhealthy":
		line = "device unhealthy " + e.Name + " " + strings.Join(e.Args, " ")
	case "device-healthy":
		line = "device healthy " + e.Name + " " + strings.Join(e.Args, " ")
	case "device-add":
		comment = "the " + e.Name + " plugin lists one more device"
	case "device-remove":
		comment = "the " + e.Name + " plugin stops listing " + strings.Join(e.Args, " ")
	case "pod-admit":
		line = "pod admit " + e.Name + " " + strings.Join(e.Args, " ")
		if e.crashAtAllocate {
			line += " " + scenario.CrashAtAllocate
		}
	case "pod-delete":
		line = "pod delete " + e.Name
	case "pod-complete":
		line = "pod complete " + e.Name
	case "kubelet-restart":
		line = "kubelet restart"
		if e.crash {
			comment = "the manager crashes here: what it had not written is lost"
		}
	case "node-reboot":
		line = "node reboot"
	case "advance":
		line = "advance " + e.Dur.String()
	case "checkpoint-corrupt":
		line = "checkpoint corrupt"
	case "checkpoint-remove":
		comment = "the checkpoint file is removed"
	case "checkpoint-legacy":
		line = "checkpoint legacy-v1 " + strings.Join(e.Args, " ")
	}
	return line, comment
}

// crashedAdmissions finds the restarts that crashed the manager in the middle of an
// admission, between its first selection and the plugin's answer, with nothing but that
// admission's own work since its pod arrived: marked 1 at the pod's admission (written with
// crash=allocate) and -1 at the restart (left out). Restarts elsewhere stay as they are.
func crashedAdmissions(steps []Step) map[int]int {
	out := map[int]int{}
	for i, s := range steps {
		if s.Event == nil || s.Event.Kind != "kubelet-restart" || s.Event.during == "" {
			continue
		}
		pod := s.Event.during
		for j := i - 1; j >= 0; j-- {
			e := steps[j].Event
			if e == nil {
				if steps[j].Task != "admit "+pod {
					break
				}
				continue
			}
			if e.Kind == "pod-admit" && e.Name == pod && !e.crashAtAllocate {
				out[j], out[i] = 1, -1
			}
			break
		}
	}
	return out
}
