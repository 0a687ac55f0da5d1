package agent

import (
	"errors"
	"io/fs"
	"net"
	"runtime"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/kdm-project/kdm/devicemanager"
)

// fakeHost is a machine with the given files.
func fakeHost(files map[string]string) host {
	return host{
		readFile: func(path string) ([]byte, error) {
			if s, ok := files[path]; ok {
				return []byte(s), nil
			}
			return nil, fs.ErrNotExist
		},
		statfs:    func(string) (int64, error) { return 100 << 30, nil },
		hostname:  func() (string, error) { return "Edge-1", nil },
		defaultIP: func() (net.IP, error) { return net.ParseIP("192.168.1.20"), nil },
		numCPU:    func() int { return 16 },
	}
}

func TestHostCapacity(t *testing.T) {
	h := fakeHost(map[string]string{"/proc/meminfo": "MemTotal:       32768000 kB\nMemFree:  1 kB\n"})
	got, err := h.capacity("/var/lib/kubelet")
	if err != nil {
		t.Fatal(err)
	}
	want := v1.ResourceList{
		v1.ResourceCPU:              resource.MustParse("16"),
		v1.ResourceMemory:           *resource.NewQuantity(32768000*1024, resource.BinarySI),
		v1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("capacity (-want +got):\n%s", diff)
	}
	for name, meminfo := range map[string]string{"no MemTotal": "MemFree: 1 kB\n", "garbage": "MemTotal: lots kB\n"} {
		if _, err := fakeHost(map[string]string{"/proc/meminfo": meminfo}).capacity("/"); err == nil {
			t.Errorf("%s: capacity() = nil error", name)
		}
	}
	h.statfs = func(string) (int64, error) { return 0, errors.New("no such file system") }
	if _, err := h.capacity("/"); err == nil {
		t.Error("capacity() with a failing statfs = nil error")
	}
}

func TestHostNodeInfoAndAddresses(t *testing.T) {
	h := fakeHost(map[string]string{
		"/proc/sys/kernel/osrelease":      "6.8.0-45-generic\n",
		"/etc/os-release":                 "NAME=Ubuntu\nPRETTY_NAME=\"Ubuntu 24.04.1 LTS\"\n",
		"/etc/machine-id":                 "abc\n",
		"/proc/sys/kernel/random/boot_id": "boot\n",
	})
	want := v1.NodeSystemInfo{Architecture: runtime.GOARCH, OperatingSystem: runtime.GOOS, KernelVersion: "6.8.0-45-generic",
		OSImage: "Ubuntu 24.04.1 LTS", MachineID: "abc", BootID: "boot", KubeletVersion: ReportedVersion()}
	if diff := cmp.Diff(want, h.nodeInfo()); diff != "" {
		t.Errorf("nodeInfo (-want +got):\n%s", diff)
	}
	if got := fakeHost(nil).nodeInfo().OSImage; got != "Unknown" {
		t.Errorf("OS image without os-release: %q", got)
	}
	if got := h.hostnameLabel("node-a"); got != "edge-1" {
		t.Errorf("hostname label %q, want the lowercased hostname", got)
	}
	h.hostname = func() (string, error) { return "a_very_bad/host name", nil }
	if got := h.hostnameLabel("node-a"); got != "node-a" {
		t.Errorf("hostname label for an invalid hostname %q, want the node name", got)
	}
	addrs, err := h.addresses(nil, "edge-1")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "192.168.1.20"}, {Type: v1.NodeHostName, Address: "edge-1"}}, addrs); diff != "" {
		t.Errorf("default addresses (-want +got):\n%s", diff)
	}
	ips, err := ParseNodeIPs("10.0.0.5,fd00::5")
	if err != nil {
		t.Fatal(err)
	}
	addrs, err = h.addresses(ips, "edge-1")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.5"}, {Type: v1.NodeInternalIP, Address: "fd00::5"},
		{Type: v1.NodeHostName, Address: "edge-1"}}, addrs); diff != "" {
		t.Errorf("given addresses (-want +got):\n%s", diff)
	}
}

// TestReportedVersion: without a Version set, the Node reports the newest kubelet row's
// release marked as kdm's; a Version set at link time or by an embedder wins.
func TestReportedVersion(t *testing.T) {
	if got, want := ReportedVersion(), devicemanager.NewestKubelet().Reference+"-kdm"; got != want {
		t.Errorf("ReportedVersion() = %q, want %q", got, want)
	}
	old := Version
	t.Cleanup(func() { Version = old })
	Version = "v9.9.9-custom"
	if got := ReportedVersion(); got != "v9.9.9-custom" {
		t.Errorf("ReportedVersion() with Version set = %q", got)
	}
}
