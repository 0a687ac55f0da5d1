package state

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// stepsOwner runs a container's steps as an owner does, with a plugin that may fail, and
// records the steps in order.
type stepsOwner struct {
	s            *State
	failAllocate error
	failWrite    error
	log          []string
}

func (o *stepsOwner) run(c *ContainerSteps) Step {
	for {
		st := c.Next(o.s)
		o.log = append(o.log, fmt.Sprintf("%d:%s", st.Kind, st.Resource))
		switch st.Kind {
		case StepDone:
			return st
		case StepAwaitUnknown:
			c.Served(false, nil)
		case StepSelect:
			ids, _, err := o.s.Select(Request{PodUID: "p", Container: "c", Resource: st.Resource, Required: st.Required,
				Reusable: st.Reusable, SourcesReady: true}, nil)
			c.Selected(ids, err)
		case StepAllocate:
			if o.failAllocate != nil {
				c.Allocated(o.failAllocate)
				continue
			}
			devs, _, _ := o.s.DevicesPerNUMA(st.Pick.Resource, st.Pick.IDs)
			st.Pick.Devices, st.Pick.Response = devs, &pluginapi.ContainerAllocateResponse{}
			c.Allocated(nil)
		case StepWrite:
			c.Written(o.failWrite)
		}
	}
}

func stepsState(t *testing.T) *State {
	t.Helper()
	s := New(Options{})
	s.Connect("example.com/gpu")
	s.ApplyDeviceList("example.com/gpu", []*pluginapi.Device{
		{ID: "a", Health: pluginapi.Healthy}, {ID: "b", Health: pluginapi.Healthy}})
	return s
}

var stepsDemands = []Demand{
	{Resource: "example.com/gpu", Required: 1, Awaitable: true},
	{Resource: "example.com/nic", Required: 1, Awaitable: true},
}

func TestContainerStepsOrder(t *testing.T) {
	s := stepsState(t)
	o := &stepsOwner{s: s}
	done := o.run(s.NewContainerSteps("p", "c", false, stepsDemands))
	if done.Err != nil {
		t.Fatalf("allocation failed: %v", done.Err)
	}
	want := []string{
		fmt.Sprintf("%d:example.com/gpu", StepCollect),
		fmt.Sprintf("%d:example.com/gpu", StepSelect),
		fmt.Sprintf("%d:example.com/gpu", StepAllocate),
		fmt.Sprintf("%d:example.com/nic", StepAwaitUnknown),
		fmt.Sprintf("%d:example.com/nic", StepPassOver),
		fmt.Sprintf("%d:", StepWrite),
		fmt.Sprintf("%d:", StepDone),
	}
	if !reflect.DeepEqual(o.log, want) {
		t.Errorf("steps:\n got %s\nwant %s", strings.Join(o.log, " "), strings.Join(want, " "))
	}
	if got := s.Allocations("p", "c")["example.com/gpu"]; got == nil || got.IDs().Len() != 1 {
		t.Errorf("the container holds %v of example.com/gpu, want one device", got)
	}
}

func TestContainerStepsFailureRecordsNothing(t *testing.T) {
	for name, o := range map[string]*stepsOwner{
		"allocate": {failAllocate: errors.New("injected Allocate failure")},
		"write":    {failWrite: errors.New("injected write failure")},
	} {
		t.Run(name, func(t *testing.T) {
			o.s = stepsState(t)
			done := o.run(o.s.NewContainerSteps("p", "c", false, stepsDemands))
			if done.Err == nil || done.Resource != "example.com/gpu" {
				t.Fatalf("done = %+v, want the failure, about example.com/gpu", done)
			}
			if got := o.s.Allocations("p", "c"); len(got) != 0 {
				t.Errorf("the failed container holds %v", got)
			}
			for _, id := range []string{"a", "b"} {
				if o.s.pending["example.com/gpu"].Has(id) {
					t.Errorf("device %s is still reserved", id)
				}
			}
		})
	}
}

func TestContainerStepsReissuesUnreportedStep(t *testing.T) {
	s := stepsState(t)
	c := s.NewContainerSteps("p", "c", false, stepsDemands)
	if st := c.Next(s); st.Kind != StepCollect {
		t.Fatalf("first step %d, want StepCollect", st.Kind)
	}
	first := c.Next(s)
	if again := c.Next(s); first.Kind != StepSelect || again.Kind != StepSelect || again.Resource != first.Resource {
		t.Errorf("an unreported select came back as %+v after %+v", again, first)
	}
}
