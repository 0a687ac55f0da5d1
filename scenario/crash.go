package scenario

import (
	"context"

	"github.com/kdm-project/kdm/deviceplugin/plugintest"
)

// CrashAtAllocate is the `pod admit` argument that crashes the manager in the middle of the
// pod's admission: once its first device selection is made and the plugin's Allocate call is
// in flight, the manager stops without writing anything more, and starts again as at
// `kubelet restart`. What the admission reserved and what the plugin would have answered are
// lost with it.
const CrashAtAllocate = "crash=allocate"

// splitCrash removes CrashAtAllocate from a pod's arguments and reports whether it was there.
func splitCrash(args []string) ([]string, bool) {
	out := make([]string, 0, len(args))
	crash := false
	for _, a := range args {
		if a == CrashAtAllocate {
			crash = true
			continue
		}
		out = append(out, a)
	}
	return out, crash
}

// admitAndCrash admits the pod with every plugin's Allocate held, waits until an Allocate
// call arrives (the admission is then between its selection and the plugin's answer), and
// restarts the manager there. A pod whose admission ends or waits before any Allocate is not
// crashed: the lines say so.
func (r *Runner) admitAndCrash(name string) ([]string, error) {
	var insts []*plugintest.Plugin
	before := 0
	for _, pl := range r.plugins {
		for _, in := range pl.running {
			insts = append(insts, in.inst)
			before += len(in.inst.Calls().Allocate)
			in.inst.SetFaults(plugintest.Faults{HangAllocate: true})
		}
	}
	defer func() {
		for _, in := range insts {
			in.SetFaults(plugintest.Faults{})
		}
	}()
	allocates := func() int {
		n := 0
		for _, in := range insts {
			n += len(in.Calls().Allocate)
		}
		return n
	}
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	for _, in := range insts {
		had := len(in.Calls().Allocate) // before the admission starts
		go func() {
			if in.WaitForCalls(ctx, func(c plugintest.Calls) bool { return len(c.Allocate) > had }) == nil {
				cancel()
			}
		}()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.admit(name) // returns when the admission ends, waits, or after settle
	}()
	select {
	case <-ctx.Done():
	case <-done:
	}
	if allocates() == before {
		<-done
		return []string{name + ": no Allocate call was made; the manager did not crash"}, nil
	}
	out := []string{name + ": the manager crashes while the plugin's Allocate call is in flight"}
	// The admission is abandoned first (its Allocate call is cancelled; as at any restart,
	// its outcome is not recorded), so that the manager stops with nothing in flight.
	r.endAdmissions()
	<-done
	more, err := r.restart(false)
	return append(out, more...), err
}
