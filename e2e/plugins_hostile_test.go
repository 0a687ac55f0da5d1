package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/agent/statusapi"
	"github.com/kdm-project/kdm/devicemanager"
	"github.com/kdm-project/kdm/deviceplugin"
	"github.com/kdm-project/kdm/deviceplugin/plugintest"
)

// The tests in this file play a hostile (or simply broken) device plugin against a real kdm
// process: it registers other resources on someone else's socket, points its endpoint out of
// the plugin directory through symlinks, and floods kubelet.sock with Register calls. Each runs
// under both policies: these guards are not a policy choice.

// gpuSocket is the NVML plugin's socket name inside the plugin directory.
const gpuSocket = "nvidia-gpu.sock"

// hostilePolicies are every policy: the kubelet minors differ in how they take a plugin's
// registrations.
var hostilePolicies = devicemanager.PolicyNames()

// registrationClient dials the node's kubelet.sock; the connection closes at cleanup.
func (n *node) registrationClient() pluginapi.RegistrationClient {
	n.t.Helper()
	conn, err := grpc.NewClient("unix://"+filepath.Join(n.pluginDir, "kubelet.sock"),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(func() { _ = conn.Close() })
	return pluginapi.NewRegistrationClient(conn)
}

// register sends one Register request with a bounded wait.
func register(c pluginapi.RegistrationClient, resource, endpoint string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	_, err := c.Register(ctx, &pluginapi.RegisterRequest{Version: pluginapi.Version, ResourceName: resource, Endpoint: endpoint})
	return err
}

// outsidePlugin serves the DevicePlugin service on dir/x.sock without registering, so that the
// test can see whether kdm ever dials it.
func outsidePlugin(t *testing.T, dir, resource string) *plugintest.Plugin {
	t.Helper()
	p, err := plugintest.New(deviceplugin.Config{ResourceName: resource, PluginDir: dir, SocketName: "x.sock",
		Registration: deviceplugin.NoRegistration,
		Devices:      []*pluginapi.Device{{ID: "stolen0", Health: pluginapi.Healthy}, {ID: "stolen1", Health: pluginapi.Healthy}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return p
}

// TestSecondResourceOnAnotherPluginsSocket: a Register that names the GPU plugin's socket for
// another resource is refused, and pods of the two resources never share a GPU.
func TestSecondResourceOnAnotherPluginsSocket(t *testing.T) {
	for _, pol := range hostilePolicies {
		t.Run(pol, func(t *testing.T) {
			n := newNode(t)
			kdm := n.startKdm("--policy", pol)
			n.startPlugin()
			n.eventually("8 GPUs", gpus(8))

			err := register(n.registrationClient(), "evil.example/gpu", gpuSocket)
			if err == nil {
				t.Errorf("Register of evil.example/gpu on %s accepted; want it refused", gpuSocket)
			} else {
				t.Logf("refused: %v", err)
				for _, want := range []string{"evil.example/gpu", "nvidia.com/gpu", gpuSocket} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("refusal %q does not name %q", err, want)
					}
				}
			}

			n.writePod("real", 8)
			n.writeResourcePod("evil", "evil.example/gpu", 8)
			st := n.eventually("both pods decided", func(st statusapi.NodeStatus) bool {
				r, e := pod(st, "real"), pod(st, "evil")
				return r != nil && e != nil && len(visible(r)) == 8
			})
			if c, ok := st.Capacity["evil.example/gpu"]; ok {
				t.Errorf("/status capacity has evil.example/gpu = %d; want no such resource", c)
			}
			byPod := map[string][]string{"real": visible(pod(st, "real")), "evil": visible(pod(st, "evil"))}
			if len(byPod["evil"]) != 0 {
				t.Errorf("pod evil holds devices %v; want none", byPod["evil"])
			}
			disjointSets(t, byPod)
			disjointSets(t, n.podResources())
			kdm.terminate(t)
		})
	}
}

// TestEndpointSymlinkOutOfPluginDir: an endpoint that leaves the plugin directory through a
// symlinked socket or a symlinked subdirectory is refused without being dialled, and no
// resource appears.
func TestEndpointSymlinkOutOfPluginDir(t *testing.T) {
	for _, pol := range hostilePolicies {
		t.Run(pol, func(t *testing.T) {
			n := newNode(t)
			kdm := n.startKdm("--policy", pol)
			n.startPlugin()
			n.eventually("8 GPUs", gpus(8))

			outside := filepath.Join(n.base, "elsewhere")
			if err := os.MkdirAll(outside, 0o750); err != nil {
				t.Fatal(err)
			}
			victim := outsidePlugin(t, outside, "evil.example/outside")
			if err := os.Symlink(victim.SocketPath(), filepath.Join(n.pluginDir, "link.sock")); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(outside, filepath.Join(n.pluginDir, "subdir")); err != nil {
				t.Fatal(err)
			}
			client := n.registrationClient()
			for _, tc := range []struct{ resource, endpoint string }{
				{"evil.example/link", "link.sock"},
				{"evil.example/subdir", "subdir/x.sock"},
			} {
				err := register(client, tc.resource, tc.endpoint)
				t.Logf("Register %s on %s: %v", tc.resource, tc.endpoint, err)
				if err == nil {
					t.Errorf("Register %s on %s accepted; want it refused", tc.resource, tc.endpoint)
				} else if !strings.Contains(err.Error(), tc.endpoint) || !strings.Contains(err.Error(), n.pluginDir) {
					t.Errorf("refusal %q does not name the endpoint %q and the directory %s", err, tc.endpoint, n.pluginDir)
				}
			}
			if calls := victim.Calls(); calls.Options != 0 || calls.ListAndWatch != 0 {
				t.Errorf("the plugin outside the directory was dialled: %d GetDevicePluginOptions, %d ListAndWatch calls",
					calls.Options, calls.ListAndWatch)
			}
			// The GPU plugin's state is a fresh /status read; neither resource may be in it.
			st := n.eventually("8 GPUs still", gpus(8))
			for _, res := range []string{"evil.example/link", "evil.example/subdir"} {
				if _, ok := st.Capacity[res]; ok {
					t.Errorf("/status capacity has %s; want no such resource", res)
				}
			}
			kdm.terminate(t)
		})
	}
}

// TestPluginDirBehindSymlinkedParent: a plugin directory reached through a symlinked parent
// (a symlinked /var/lib/kubelet) works, and so does an endpoint in a real subdirectory.
func TestPluginDirBehindSymlinkedParent(t *testing.T) {
	for _, pol := range hostilePolicies {
		t.Run(pol, func(t *testing.T) {
			n := newNode(t)
			realDir := filepath.Join(n.base, "real-kubelet")
			if err := os.MkdirAll(filepath.Join(realDir, "dp", "sub"), 0o750); err != nil {
				t.Fatal(err)
			}
			link := filepath.Join(n.base, "kubelet")
			if err := os.Symlink(realDir, link); err != nil {
				t.Fatal(err)
			}
			n.pluginDir = filepath.Join(link, "dp")
			kdm := n.startKdm("--policy", pol)
			n.startPlugin()
			n.eventually("8 GPUs through the symlinked parent", gpus(8))

			sub := outsidePlugin(t, filepath.Join(n.pluginDir, "sub"), "example.com/sub")
			if err := register(n.registrationClient(), "example.com/sub", "sub/x.sock"); err != nil {
				t.Fatalf("Register on a socket in a real subdirectory: %v", err)
			}
			n.eventually("the subdirectory plugin's devices", func(st statusapi.NodeStatus) bool {
				return st.Allocatable["example.com/sub"] == 2
			})
			if sub.Calls().Options == 0 {
				t.Errorf("the subdirectory plugin was never asked for its options")
			}
			n.writePod("a", 2)
			n.eventually("pod a admitted", func(st statusapi.NodeStatus) bool { return len(visible(pod(st, "a"))) == 2 })
			kdm.terminate(t)
		})
	}
}

// vmRSS reads a process's resident set size in bytes from /proc.
func vmRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}

// logSize is the current length of a process's log file.
func logSize(t *testing.T, p *process) int64 {
	t.Helper()
	fi, err := os.Stat(p.log)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// Bounds of the Register flood test.
const (
	floodCalls    = 10000
	floodWorkers  = 200
	floodDeadline = 25 * time.Second // the whole flood; kdm must answer far faster
	// floodRSSGrowth is how much kdm's RSS may grow over the flood, measured once in-flight
	// dials have ended. Refused calls must cost nothing that stays.
	floodRSSGrowth = 40 << 20
	// floodLogLines bounds kdm's log for the flood: the same cause is logged once per interval.
	floodLogLines = 1000
)

// TestRegisterFlood: 10,000 Register calls, half to sockets that do not exist, half naming
// other resources on the GPU plugin's socket, each with a unique resource name, from many
// goroutines. kdm answers them all quickly, its memory settles near where it was, its log
// stays short, and afterwards it admits a pod and accepts the real plugin's re-registration.
func TestRegisterFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("load test: 10,000 Register calls per policy; run by make test")
	}
	for _, pol := range hostilePolicies {
		t.Run(pol, func(t *testing.T) {
			n := newNode(t)
			kdm := n.startKdm("--policy", pol)
			n.startPlugin()
			n.eventually("8 GPUs", gpus(8))
			time.Sleep(time.Second) // let start-up allocations settle
			before := vmRSS(t, kdm.cmd.Process.Pid)
			logStart := logSize(t, kdm)

			client := n.registrationClient()
			ctx, cancel := context.WithTimeout(context.Background(), floodDeadline)
			defer cancel()
			var next, answered, refused atomic.Int64
			var wg sync.WaitGroup
			for w := 0; w < floodWorkers; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for ctx.Err() == nil {
						i := next.Add(1) - 1
						if i >= floodCalls {
							return
						}
						resource, ep := fmt.Sprintf("flood.example/r%d", i), fmt.Sprintf("missing-%d.sock", i)
						if i%2 == 1 {
							ep = gpuSocket
						}
						cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
						_, err := client.Register(cctx, &pluginapi.RegisterRequest{Version: pluginapi.Version, ResourceName: resource, Endpoint: ep})
						ccancel()
						answered.Add(1)
						if err != nil {
							refused.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			if got := answered.Load(); got < floodCalls {
				t.Errorf("only %d of %d Register calls finished within %v", got, floodCalls, floodDeadline)
			}
			if got := answered.Load() - refused.Load(); got != 0 {
				t.Errorf("%d flood registrations were accepted; want none", got)
			}
			time.Sleep(3 * time.Second) // in-flight dials end with their callers' deadlines
			after := vmRSS(t, kdm.cmd.Process.Pid)
			t.Logf("kdm RSS %d MiB before the flood, %d MiB after", before>>20, after>>20)
			if after-before > floodRSSGrowth {
				t.Errorf("kdm RSS grew by %d MiB over the flood; want at most %d MiB", (after-before)>>20, floodRSSGrowth>>20)
			}
			b, err := os.ReadFile(kdm.log)
			if err != nil {
				t.Fatal(err)
			}
			flood := b[logStart:]
			lines := bytes.Count(flood, []byte("\n"))
			t.Logf("kdm logged %d lines for %d Register calls, starting:\n%s", lines, floodCalls, tail(string(flood[:min(len(flood), 1500)]), 1500))
			if lines > floodLogLines {
				t.Errorf("kdm logged %d lines for the flood; want at most %d", lines, floodLogLines)
			}

			st := n.eventually("8 GPUs after the flood", gpus(8))
			for res := range st.Capacity {
				if strings.HasPrefix(res, "flood.example/") {
					t.Fatalf("/status capacity has flood resource %s", res)
				}
			}
			n.writePod("after", 2)
			n.eventually("a pod admitted after the flood", func(st statusapi.NodeStatus) bool { return len(visible(pod(st, "after"))) == 2 })
			n.startPluginAndKillPrevious(t)
			kdm.terminate(t)
		})
	}
}
