package upstreambench

import (
	"os"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
	kubeletmetrics "k8s.io/kubernetes/pkg/kubelet/metrics"

	"github.com/kdm-project/kdm/test/upstreambench/suite"
)

// TestMain silences the kubelet's global klog output (the stub and the manager log every
// RPC; kdm is given a discarding logger too) and registers the kubelet's metrics, which a
// running kubelet always has, so both managers record theirs.
func TestMain(m *testing.M) {
	if suite.RunPluginProcess() { // this binary was started as a plugin (suite.PluginProcess)
		return
	}
	klog.SetLogger(logr.Discard())
	kubeletmetrics.Register()
	os.Exit(m.Run())
}
