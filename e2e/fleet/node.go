package fleet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/kdm-project/kdm/e2e/kubecluster"
)

// Node is one kdm agent and its GPU plugin, each a real process, with its own directories.
type Node struct {
	Name string
	// GPUs is how many mock GPUs its plugin has.
	GPUs int

	f          *Fleet
	dir        string
	pluginDir  string
	rootDir    string
	kubeconfig string
	net        *netns // nil unless the node runs in its own network namespace
	kdm        *kubecluster.Process
	plugin     *kubecluster.Process
}

func newNode(f *Fleet, i int, name string, isolate bool) (*Node, error) {
	n := &Node{Name: name, GPUs: GPUsOf(i), f: f, dir: filepath.Join(f.opts.Dir, name)}
	n.pluginDir, n.rootDir = filepath.Join(n.dir, "dp"), filepath.Join(n.dir, "root")
	for _, d := range []string{n.pluginDir, n.rootDir} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return nil, err
		}
	}
	n.kubeconfig = filepath.Join(n.dir, "kubeconfig")
	if !isolate {
		return n, f.Cluster.WriteKubeconfig("system:node:"+name, n.kubeconfig)
	}
	var err error
	if n.net, err = newNetns(i, f.Cluster.URL); err != nil {
		return nil, err
	}
	return n, n.net.writeKubeconfig(f.Cluster, name, n.kubeconfig)
}

// Start starts the plugin and kdm (again, after Kill): the node boots. Its state on disk (the
// checkpoint, the pod results) is kept across Kill and Start, as a machine's disk is.
func (n *Node) Start() error {
	var err error
	n.plugin, err = n.startProc("kdm-nvml-plugin", n.f.opts.Plugin, "--mock", "dgxa100", "--mock-gpus", strconv.Itoa(n.GPUs),
		"--device-plugin-dir", n.pluginDir)
	if err != nil {
		return err
	}
	n.kdm, err = n.startProc("kdm", n.f.opts.KDM, "run", "--kubeconfig", n.kubeconfig, "--node-name", n.Name,
		"--root-dir", n.rootDir, "--device-plugin-dir", n.pluginDir, "--healthz-port", "0", "--node-ip", "127.0.0.1")
	return err
}

// Kill SIGKILLs kdm and the plugin, as a node that loses power.
func (n *Node) Kill() {
	for _, p := range []*kubecluster.Process{n.kdm, n.plugin} {
		if p != nil {
			p.Kill()
		}
	}
}

// Close removes the node's network namespace, if it has one. Call it after Kill.
func (n *Node) Close() {
	if n.net != nil {
		n.net.close()
	}
}

// KDMPID is the running kdm's process ID, or 0.
func (n *Node) KDMPID() int {
	if n.kdm == nil || n.kdm.Exited() {
		return 0
	}
	return n.kdm.PID()
}

// Log returns the tail of kdm's log.
func (n *Node) Log(max int) string {
	if n.kdm == nil {
		return ""
	}
	b, _ := os.ReadFile(n.kdm.LogPath())
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
}

// PodResources lists the node's assignments through its podresources socket: namespace/name →
// UID-less list of device IDs of every container.
func (n *Node) PodResources(ctx context.Context) (map[string][]string, error) {
	sock := filepath.Join(n.rootDir, "pod-resources", "kubelet.sock")
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	resp, err := podresourcesv1.NewPodResourcesListerClient(conn).List(ctx, &podresourcesv1.ListPodResourcesRequest{}, grpc.WaitForReady(true))
	if err != nil {
		return nil, fmt.Errorf("%s: podresources List: %w", n.Name, err)
	}
	out := map[string][]string{}
	for _, p := range resp.PodResources {
		for _, c := range p.Containers {
			for _, d := range c.Devices {
				if d.ResourceName == GPUResource {
					out[p.Namespace+"/"+p.Name] = append(out[p.Namespace+"/"+p.Name], d.DeviceIds...)
				}
			}
		}
	}
	return out, nil
}

// startProc starts a node's binary, inside the node's network namespace when it has one; its
// log is <node dir>/<name>.log.
func (n *Node) startProc(name, bin string, args ...string) (*kubecluster.Process, error) {
	if n.net != nil {
		args = append([]string{"netns", "exec", n.net.name, bin}, args...)
		bin = "ip"
	}
	p, err := kubecluster.StartProcess(n.dir, name, bin, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", n.Name, err)
	}
	return p, nil
}
