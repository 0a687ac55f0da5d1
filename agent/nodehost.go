package agent

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2"

	"github.com/kdm-project/kdm/devicemanager"
)

// Version, when set, is the version kdm reports in the Node's status.nodeInfo.kubeletVersion
// instead of ReportedVersion's default. A build sets it with
// -ldflags "-X github.com/kdm-project/kdm/agent.Version=…"; embedders may set it before New.
var Version string

// ReportedVersion is the version kdm reports as the Node's kubelet version: Version when set,
// else the newest kubelet whose device manager kdm follows (devicemanager.NewestKubelet, the
// default policy's), marked as kdm's: its release tag with "-kdm" appended.
func ReportedVersion() string {
	if Version != "" {
		return Version
	}
	return devicemanager.NewestKubelet().Reference + "-kdm"
}

// host reads what the Node says about the machine. Its functions are fields so that tests can
// stand in for the machine.
type host struct {
	readFile  func(path string) ([]byte, error)
	statfs    func(path string) (total int64, err error)
	hostname  func() (string, error)
	defaultIP func() (net.IP, error)
	numCPU    func() int
}

// realHost reads the machine kdm runs on.
func realHost(log klog.Logger) host {
	return host{
		readFile: os.ReadFile,
		statfs: func(path string) (int64, error) {
			var st syscall.Statfs_t
			if err := syscall.Statfs(path, &st); err != nil {
				return 0, err
			}
			// Blocks and Bsize have types that differ between operating systems.
			return int64(st.Blocks) * int64(st.Bsize), nil
		},
		hostname:  os.Hostname,
		defaultIP: func() (net.IP, error) { return utilnet.ChooseHostInterfaceWithLogger(log) },
		numCPU:    runtime.NumCPU,
	}
}

// capacity detects cpu (online CPUs), memory (MemTotal of /proc/meminfo) and
// ephemeral-storage (the size of the file system holding rootDir), as the kubelet's
// capacity. A value that cannot be read is an error: a Node with a silent 0 would repel pods.
func (h host) capacity(rootDir string) (v1.ResourceList, error) {
	meminfo, err := h.readFile("/proc/meminfo")
	if err != nil {
		return nil, fmt.Errorf("detecting memory capacity: %w", err)
	}
	mem, err := memTotal(meminfo)
	if err != nil {
		return nil, fmt.Errorf("detecting memory capacity: %w", err)
	}
	disk, err := h.statfs(rootDir)
	if err != nil {
		return nil, fmt.Errorf("detecting ephemeral-storage capacity of %s: %w", rootDir, err)
	}
	return v1.ResourceList{
		v1.ResourceCPU:              *resource.NewQuantity(int64(h.numCPU()), resource.DecimalSI),
		v1.ResourceMemory:           *resource.NewQuantity(mem, resource.BinarySI),
		v1.ResourceEphemeralStorage: *resource.NewQuantity(disk, resource.BinarySI),
	}, nil
}

// memTotal returns MemTotal of a /proc/meminfo, in bytes.
func memTotal(meminfo []byte) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(meminfo))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 || fields[0] != "MemTotal:" {
			continue
		}
		kb, err := strconv.ParseInt(fields[1], 10, 64)
		if err != nil || kb <= 0 {
			return 0, fmt.Errorf("bad MemTotal line %q", sc.Text())
		}
		return kb * 1024, nil
	}
	return 0, fmt.Errorf("no MemTotal in /proc/meminfo")
}

// nodeInfo is the Node's status.nodeInfo: architecture, OS, kernel, OS image, the machine's
// IDs where readable, and ReportedVersion as the kubelet version. kdm runs no containers and leaves
// the container runtime version empty.
func (h host) nodeInfo() v1.NodeSystemInfo {
	read := func(path string) string {
		b, err := h.readFile(path)
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(b))
	}
	return v1.NodeSystemInfo{
		Architecture:    runtime.GOARCH,
		OperatingSystem: runtime.GOOS,
		KernelVersion:   read("/proc/sys/kernel/osrelease"),
		OSImage:         osImage(read("/etc/os-release")),
		MachineID:       read("/etc/machine-id"),
		SystemUUID:      read("/sys/class/dmi/id/product_uuid"),
		BootID:          read("/proc/sys/kernel/random/boot_id"),
		KubeletVersion:  ReportedVersion(),
	}
}

// osImage returns PRETTY_NAME of an os-release file, or "Unknown" as the kubelet says.
func osImage(osRelease string) string {
	for _, line := range strings.Split(osRelease, "\n") {
		if v, ok := strings.CutPrefix(line, "PRETTY_NAME="); ok {
			if s, err := strconv.Unquote(v); err == nil {
				return s
			}
			return strings.Trim(v, `"'`)
		}
	}
	return "Unknown"
}

// hostnameLabel is the kubernetes.io/hostname label: the lowercased hostname, or the node
// name when the hostname is not a valid label value.
func (h host) hostnameLabel(nodeName string) string {
	name, err := h.hostname()
	name = strings.ToLower(strings.TrimSpace(name))
	if err != nil || name == "" || len(validation.IsValidLabelValue(name)) > 0 {
		return nodeName
	}
	return name
}

// addresses are the Node's status.addresses: the InternalIPs of nodeIPs (or the host's
// default-route address when none is given) and the Hostname.
func (h host) addresses(nodeIPs []net.IP, hostname string) ([]v1.NodeAddress, error) {
	if len(nodeIPs) == 0 {
		ip, err := h.defaultIP()
		if err != nil {
			return nil, fmt.Errorf("choosing the node IP (set one): %w", err)
		}
		nodeIPs = []net.IP{ip}
	}
	var out []v1.NodeAddress
	for _, ip := range nodeIPs {
		out = append(out, v1.NodeAddress{Type: v1.NodeInternalIP, Address: ip.String()})
	}
	return append(out, v1.NodeAddress{Type: v1.NodeHostName, Address: hostname}), nil
}
