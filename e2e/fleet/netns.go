package fleet

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kdm-project/kdm/e2e/kubecluster"
)

// netns is a node's own network namespace, joined to the host by a veth pair: the host end
// 10.231.x.1, the node's end 10.231.x.2. The apiserver listens on the host's loopback only, so
// a forwarder on the host end passes the node's connections to it. Cut takes the host end
// down: the node's packets go nowhere, as when a site loses its uplink, and its open
// connections hang rather than close.
type netns struct {
	name, hostIf, nodeIf string
	hostIP, nodeIP       string
	fwd                  net.Listener
	target               string

	mu    sync.Mutex
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

// newNetns creates the namespace, the veth pair and the forwarder to apiURL's host:port.
func newNetns(i int, apiURL string) (_ *netns, err error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("fleet: an isolated node needs root (ip netns, veth)")
	}
	u, err := url.Parse(apiURL)
	if err != nil {
		return nil, err
	}
	tag := fmt.Sprintf("%d%d", os.Getpid()%100000, i%100)
	subnet := fmt.Sprintf("10.231.%d", os.Getpid()%250)
	ns := &netns{name: "kdmfleet-" + tag, hostIf: "kf" + tag + "h", nodeIf: "kf" + tag + "n",
		hostIP: subnet + ".1", nodeIP: subnet + ".2", target: u.Host, conns: map[net.Conn]bool{}}
	defer func() {
		if err != nil {
			ns.close()
		}
	}()
	for _, args := range [][]string{
		{"netns", "add", ns.name},
		{"link", "add", ns.hostIf, "type", "veth", "peer", "name", ns.nodeIf},
		{"link", "set", ns.nodeIf, "netns", ns.name},
		{"addr", "add", ns.hostIP + "/30", "dev", ns.hostIf},
		{"link", "set", ns.hostIf, "up"},
		{"netns", "exec", ns.name, "ip", "addr", "add", ns.nodeIP + "/30", "dev", ns.nodeIf},
		{"netns", "exec", ns.name, "ip", "link", "set", ns.nodeIf, "up"},
		{"netns", "exec", ns.name, "ip", "link", "set", "lo", "up"},
	} {
		if err := ip(args...); err != nil {
			return nil, err
		}
	}
	if ns.fwd, err = net.Listen("tcp", ns.hostIP+":0"); err != nil {
		return nil, err
	}
	ns.wg.Add(1)
	go ns.forward()
	return ns, nil
}

func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// writeKubeconfig writes the node's kubeconfig: the forwarder's address, verified against
// the apiserver's certificate name (localhost).
func (ns *netns) writeKubeconfig(c *kubecluster.Cluster, node, path string) error {
	rc, err := c.Config("system:node:" + node)
	if err != nil {
		return err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["fleet"] = &clientcmdapi.Cluster{Server: "https://" + ns.fwd.Addr().String(),
		CertificateAuthorityData: rc.CAData, TLSServerName: "localhost"}
	cfg.AuthInfos[node] = &clientcmdapi.AuthInfo{Token: rc.BearerToken}
	cfg.Contexts["fleet"] = &clientcmdapi.Context{Cluster: "fleet", AuthInfo: node}
	cfg.CurrentContext = "fleet"
	return clientcmd.WriteToFile(*cfg, path)
}

// forward accepts the node's connections and pipes each to the apiserver.
func (ns *netns) forward() {
	defer ns.wg.Done()
	for {
		in, err := ns.fwd.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", ns.target)
		if err != nil {
			_ = in.Close()
			continue
		}
		ns.track(in, out)
		ns.wg.Add(2)
		go ns.pipe(in, out)
		go ns.pipe(out, in)
	}
}

func (ns *netns) track(conns ...net.Conn) {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	for _, c := range conns {
		ns.conns[c] = true
	}
}

func (ns *netns) pipe(dst, src net.Conn) {
	defer ns.wg.Done()
	_, _ = io.Copy(dst, src)
	_ = dst.Close()
	_ = src.Close()
	ns.mu.Lock()
	delete(ns.conns, dst)
	delete(ns.conns, src)
	ns.mu.Unlock()
}

// Cut takes the host end of the veth down (down true) or up again.
func (ns *netns) cut(down bool) error {
	state := "up"
	if down {
		state = "down"
	}
	return ip("link", "set", ns.hostIf, state)
}

// close stops the forwarder, closes its connections and deletes the namespace (which takes the
// veth pair with it).
func (ns *netns) close() {
	if ns.fwd != nil {
		_ = ns.fwd.Close()
	}
	ns.mu.Lock()
	for c := range ns.conns {
		_ = c.Close()
	}
	ns.mu.Unlock()
	ns.wg.Wait()
	_ = ip("link", "del", ns.hostIf)
	_ = ip("netns", "del", ns.name)
}
