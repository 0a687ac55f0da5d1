package nvml

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// gpu is one enumerated GPU.
type gpu struct {
	UUID  string
	Index int
	Minor int
	BusID string // lower-case, as in /sys/bus/pci/devices: 0000:07:00.0
	NUMA  int    // -1 when unknown
}

// enumerate lists the GPUs the library sees, in index order.
func enumerate(lib nvml.Interface, sysfsRoot string) ([]gpu, error) {
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("counting GPUs: %v", nvml.ErrorString(ret))
	}
	out := make([]gpu, 0, n)
	for i := 0; i < n; i++ {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("GPU %d: getting its handle: %v", i, nvml.ErrorString(ret))
		}
		uuid, ret := d.GetUUID()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("GPU %d: getting its UUID: %v", i, nvml.ErrorString(ret))
		}
		minor, ret := d.GetMinorNumber()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("GPU %s: getting its minor number: %v", uuid, nvml.ErrorString(ret))
		}
		g := gpu{UUID: uuid, Index: i, Minor: minor, NUMA: -1}
		if pci, ret := d.GetPciInfo(); ret == nvml.SUCCESS {
			g.BusID = normalizeBusID(busIDString(pci.BusId))
			g.NUMA = numaNode(sysfsRoot, g.BusID)
		}
		out = append(out, g)
	}
	return out, nil
}

func busIDString(raw [32]int8) string {
	var b strings.Builder
	for _, c := range raw {
		if c == 0 {
			break
		}
		b.WriteByte(byte(c))
	}
	return b.String()
}

// normalizeBusID turns NVML's "00000000:07:00.0" into sysfs's "0000:07:00.0".
func normalizeBusID(id string) string {
	id = strings.ToLower(id)
	if domain, rest, ok := strings.Cut(id, ":"); ok && len(domain) > 4 {
		id = domain[len(domain)-4:] + ":" + rest
	}
	return id
}

// numaNode reads <sysfs>/bus/pci/devices/<busID>/numa_node; -1 when absent or negative.
func numaNode(sysfsRoot, busID string) int {
	if busID == "" {
		return -1
	}
	b, err := os.ReadFile(filepath.Join(sysfsRoot, "bus", "pci", "devices", busID, "numa_node"))
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// errNoLibrary explains a missing libnvidia-ml.
var errNoLibrary = errors.New("NVML is not available (libnvidia-ml.so.1 not found: no NVIDIA driver on this machine); use --mock dgxa100 to run on mock GPUs")
