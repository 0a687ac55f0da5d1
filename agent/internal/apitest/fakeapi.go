// Package apitest holds the test helpers of the agent and its node status publisher for the
// Kubernetes API: FakeAPI, client-go's fake clientset counting the requests made to it and
// failing those a test asks it to fail, and helpers for the real test cluster
// (e2e/kubecluster). Only tests import it.
package apitest

import (
	"context"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
)

// FakeAPI is client-go's fake clientset with a log of the requests made to it and an optional
// failure injected per verb and resource. Its methods are safe for concurrent use.
type FakeAPI struct {
	*fake.Clientset

	mu    sync.Mutex
	fails map[string]error // "verb resource" → error returned instead of the fake's answer
	calls map[string]int   // "verb resource[/subresource]" → how many were made
}

// NewFakeAPI returns a FakeAPI holding objects.
func NewFakeAPI(objects ...runtime.Object) *FakeAPI {
	f := &FakeAPI{Clientset: fake.NewClientset(objects...), fails: map[string]error{}, calls: map[string]int{}}
	f.PrependReactor("*", "*", func(a clienttesting.Action) (bool, runtime.Object, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		key := a.GetVerb() + " " + a.GetResource().Resource
		full := key
		if a.GetSubresource() != "" {
			full += "/" + a.GetSubresource()
		}
		f.calls[full]++
		if err := f.fails[key]; err != nil {
			return true, nil, err
		}
		return false, nil, nil
	})
	return f
}

// Fail makes every verb on resource fail with err (nil: succeed again).
func (f *FakeAPI) Fail(verb, resource string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fails[verb+" "+resource] = err
}

// Count returns how many "verb resource[/subresource]" requests were made.
func (f *FakeAPI) Count(call string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[call]
}

// Eventually polls cond until it holds; after 30 s the test fails, naming what.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 30*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("timed out waiting for %s", what)
	}
}
