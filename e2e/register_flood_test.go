package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/agent/statusapi"
	"github.com/kdm-project/kdm/internal/silentsock"
)

// Bounds of the silent Register flood test.
const (
	silentFlooders = 64
	// silentFloodRegisterDeadline bounds how long the restarted GPU plugin may take, from its
	// process start, to show its 8 GPUs while the flood goes on: the process starting, its
	// first Register or its retries after 0.5 s and 1.5 s. The dial timeout the flood's calls
	// wait out is 10 s.
	silentFloodRegisterDeadline = 5 * time.Second
)

// silentSockets listens on count unix sockets in dir that accept connections but never
// answer (silentsock.Listen) and returns their names, and a function that reports whether
// kdm has connected to every one of them.
func silentSockets(t *testing.T, dir string, count int) (names []string, held func() bool) {
	t.Helper()
	var socks []*silentsock.Socket
	for i := range count {
		name := fmt.Sprintf("silent-%d.sock", i)
		socks = append(socks, silentsock.Listen(t, filepath.Join(dir, name)))
		names = append(names, name)
	}
	return names, func() bool {
		for _, s := range socks {
			if s.Accepted() == 0 {
				return false
			}
		}
		return true
	}
}

// TestRegisterFloodOfSilentSockets: 64 goroutines, each on its own connection to kubelet.sock,
// register sockets that accept but never answer, in a loop, naming either the GPU resource or
// other resources. Once kdm holds every flood call (it has connected to every socket), the GPU
// plugin is SIGKILLed and restarted: it registers within silentFloodRegisterDeadline of its
// start, and a GPU pod is admitted, while the flood goes on. Before, the flood held every
// Register slot for its 10 s dials and the plugin was refused with ResourceExhausted for as
// long as the flood lasted.
func TestRegisterFloodOfSilentSockets(t *testing.T) {
	innerLoopSkips(t, "floods kdm with silent registrants under every policy")
	for _, pol := range hostilePolicies {
		for _, flood := range []struct {
			name     string
			resource func(worker, call int) string
		}{
			{"naming the GPU resource", func(int, int) string { return "nvidia.com/gpu" }},
			{"naming other resources", func(w, n int) string { return fmt.Sprintf("flood.example/r%d-%d", w, n) }},
		} {
			t.Run(pol+"/"+flood.name, func(t *testing.T) {
				n := newNode(t)
				kdm := n.startKdm("--policy", pol)
				n.startPlugin()
				n.eventually("8 GPUs", gpus(8))
				sockets, held := silentSockets(t, n.pluginDir, silentFlooders)

				ctx, cancel := context.WithCancel(context.Background())
				var (
					wg        sync.WaitGroup
					exhausted atomic.Int64
				)
				stop := func() { cancel(); wg.Wait() }
				t.Cleanup(stop)
				for i, socket := range sockets {
					conn, err := grpc.NewClient("unix://"+filepath.Join(n.pluginDir, "kubelet.sock"),
						grpc.WithTransportCredentials(insecure.NewCredentials()))
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { _ = conn.Close() })
					client := pluginapi.NewRegistrationClient(conn)
					wg.Add(1)
					go func() {
						defer wg.Done()
						for call := 0; ctx.Err() == nil; call++ {
							_, err := client.Register(ctx, &pluginapi.RegisterRequest{Version: pluginapi.Version,
								ResourceName: flood.resource(i, call), Endpoint: socket})
							if status.Code(err) == codes.ResourceExhausted {
								exhausted.Add(1)
							}
						}
					}()
				}
				deadline := time.Now().Add(30 * time.Second)
				for !held() {
					if time.Now().After(deadline) {
						t.Fatal("kdm never held every flood call")
					}
					time.Sleep(10 * time.Millisecond)
				}

				n.killPlugins()
				n.eventually("allocatable 0 while the plugin is down", func(st statusapi.NodeStatus) bool {
					return st.Capacity["nvidia.com/gpu"] == 8 && st.Allocatable["nvidia.com/gpu"] == 0
				})
				started := time.Now()
				n.startPlugin()
				if !n.within(silentFloodRegisterDeadline, gpus(8)) {
					t.Fatalf("the restarted GPU plugin did not show its 8 GPUs within %v of its start during the flood",
						silentFloodRegisterDeadline)
				}
				t.Logf("the restarted plugin registered %v after its start, during the flood (%d flood calls got ResourceExhausted so far)",
					time.Since(started), exhausted.Load())
				n.writePod("during-flood", 2)
				n.eventually("a GPU pod admitted during the flood", func(st statusapi.NodeStatus) bool {
					return len(visible(pod(st, "during-flood"))) == 2
				})
				if ctx.Err() != nil {
					t.Fatal("the flood stopped early")
				}
				stop()
				st := n.eventually("8 GPUs after the flood", gpus(8))
				for res := range st.Capacity {
					if res != "nvidia.com/gpu" {
						t.Errorf("/status capacity has flood resource %s", res)
					}
				}
				kdm.terminate(t)
			})
		}
	}
}

// within polls /status every 50 ms until cond holds, for at most limit; it reports whether it
// did.
func (n *node) within(limit time.Duration, cond func(statusapi.NodeStatus) bool) bool {
	deadline := time.Now().Add(limit)
	for {
		if st, ok := n.status(); ok && cond(st) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}
