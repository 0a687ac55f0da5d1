package kubecluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Options describe a cluster to start.
type Options struct {
	// Binaries to run.
	Binaries Binaries
	// Dir holds certificates, tokens, etcd's data and both servers' logs. It must exist.
	Dir string
	// Nodes are the node names that get a kubelet identity (user system:node:<name> in group
	// system:nodes), authorised by the Node authorizer and NodeRestriction as kubelets are.
	Nodes []string
	// ReadyTimeout bounds the wait for /readyz (and, with ControlPlane, each component's
	// /healthz); default one minute.
	ReadyTimeout time.Duration
	// ControlPlane also starts the real kube-scheduler and kube-controller-manager, so that
	// pods are scheduled and Deployments rolled out as in a real cluster.
	ControlPlane bool
	// Controllers the controller-manager runs (its --controllers); zero: DefaultControllers.
	Controllers []string
	// NodeMonitorGracePeriod is the controller-manager's --node-monitor-grace-period; zero:
	// DefaultNodeMonitorGracePeriod.
	NodeMonitorGracePeriod time.Duration
	// AuditLog makes the apiserver write one JSON line per finished request (audit level
	// Metadata: who, verb, resource, user agent) to AuditLogPath, so that a test can attribute
	// requests to the identity that made them.
	AuditLog bool
}

// Cluster is a running etcd and kube-apiserver, and with Options.ControlPlane a
// kube-scheduler and kube-controller-manager.
type Cluster struct {
	// URL is the apiserver's https address.
	URL  string
	dir  string
	ca   []byte
	tok  map[string]string // user → bearer token
	etcd *Process
	api  *Process
	// scheduler and controllerManager run with Options.ControlPlane.
	scheduler, controllerManager *Process
}

// AdminUser is the identity in system:masters that tests use to create pods.
const AdminUser = "admin"

// Start starts etcd and kube-apiserver and waits until the apiserver is ready; with
// Options.ControlPlane it then starts kube-scheduler and kube-controller-manager and waits
// until they are healthy. On error everything started is stopped again. Stop the cluster with
// Stop.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = time.Minute
	}
	c := &Cluster{dir: opts.Dir, tok: map[string]string{}}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	pki, err := writePKI(opts.Dir)
	if err != nil {
		return nil, err
	}
	c.ca = pki.caPEM
	var tokens strings.Builder
	identities := [][3]string{{AdminUser, AdminUser, "system:masters"}}
	for _, n := range opts.Nodes {
		identities = append(identities, [3]string{"system:node:" + n, "system:node:" + n, "system:nodes"})
	}
	if opts.ControlPlane {
		identities = append(identities, controlPlaneIdentities()...)
	}
	for i, id := range identities {
		t, err := randomToken()
		if err != nil {
			return nil, err
		}
		c.tok[id[0]] = t
		if id[2] == "" {
			fmt.Fprintf(&tokens, "%s,%s,uid-%d\n", t, id[1], i)
		} else {
			fmt.Fprintf(&tokens, "%s,%s,uid-%d,\"%s\"\n", t, id[1], i, id[2])
		}
	}
	tokenFile := filepath.Join(opts.Dir, "tokens.csv")
	if err := os.WriteFile(tokenFile, []byte(tokens.String()), 0o600); err != nil {
		return nil, err
	}

	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	clientURL := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	peerURL := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	c.etcd, err = StartProcess(opts.Dir, "etcd", opts.Binaries.Etcd,
		"--name=kdm-test",
		"--data-dir="+filepath.Join(opts.Dir, "etcd-data"),
		"--listen-client-urls="+clientURL, "--advertise-client-urls="+clientURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=kdm-test="+peerURL,
		"--unsafe-no-fsync", "--log-level=warn")
	if err != nil {
		return nil, err
	}
	c.URL = "https://127.0.0.1:" + strconv.Itoa(ports[2])
	apiArgs := []string{"--etcd-servers=" + clientURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(ports[2]),
		"--tls-cert-file=" + pki.servingCert, "--tls-private-key-file=" + pki.servingKey,
		"--client-ca-file=" + pki.caCert,
		"--token-auth-file=" + tokenFile,
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + pki.saKey,
		"--service-account-signing-key-file=" + pki.saKey,
		"--service-cluster-ip-range=10.0.0.0/24",
		"--endpoint-reconciler-type=none",
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--disable-admission-plugins=ServiceAccount",
		"--enable-priority-and-fairness=false",
		"--profiling=false",
		"--v=1"}
	if opts.AuditLog {
		flags, err := writeAuditPolicy(opts.Dir)
		if err != nil {
			return nil, err
		}
		apiArgs = append(apiArgs, flags...)
	}
	c.api, err = StartProcess(opts.Dir, "kube-apiserver", opts.Binaries.APIServer, apiArgs...)
	if err != nil {
		return nil, err
	}
	if err := c.waitReady(ctx, opts.ReadyTimeout); err != nil {
		return nil, err
	}
	if opts.ControlPlane {
		if err := c.startControlPlane(ctx, opts); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Stop terminates the controller-manager, the scheduler, the apiserver, then etcd: SIGTERM,
// then SIGKILL after five seconds.
func (c *Cluster) Stop() {
	for _, s := range []*Process{c.controllerManager, c.scheduler, c.api, c.etcd} {
		if s != nil {
			s.Stop()
		}
	}
}

// Logs returns the tail of every server's log, for a failing test to print.
func (c *Cluster) Logs(n int) string {
	var b strings.Builder
	for _, s := range []*Process{c.etcd, c.api, c.scheduler, c.controllerManager} {
		if s == nil {
			continue
		}
		data, _ := os.ReadFile(s.log)
		if len(data) > n {
			data = data[len(data)-n:]
		}
		fmt.Fprintf(&b, "--- %s (%s) ---\n%s\n", s.name, s.log, data)
	}
	return b.String()
}

// Config returns a client configuration for the user (AdminUser, system:node:<name>, or with
// Options.ControlPlane SchedulerUser and ControllerManagerUser).
func (c *Cluster) Config(user string) (*rest.Config, error) {
	tok, ok := c.tok[user]
	if !ok {
		return nil, fmt.Errorf("kubecluster: no identity %q (declare nodes in Options.Nodes)", user)
	}
	return &rest.Config{Host: c.URL, BearerToken: tok, TLSClientConfig: rest.TLSClientConfig{CAData: c.ca}}, nil
}

// Client returns a clientset for the user.
func (c *Cluster) Client(user string) (kubernetes.Interface, error) {
	cfg, err := c.Config(user)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

// WriteKubeconfig writes a kubeconfig file for the user to path, as `kdm run --kubeconfig`
// reads it.
func (c *Cluster) WriteKubeconfig(user, path string) error {
	tok, ok := c.tok[user]
	if !ok {
		return fmt.Errorf("kubecluster: no identity %q", user)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["test"] = &clientcmdapi.Cluster{Server: c.URL, CertificateAuthorityData: c.ca}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: tok}
	cfg.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: user}
	cfg.CurrentContext = "test"
	return clientcmd.WriteToFile(*cfg, path)
}

// waitReady polls /readyz until it answers ok, a server exits, or the timeout passes.
func (c *Cluster) waitReady(ctx context.Context, timeout time.Duration) error {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.ca)
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(timeout)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.URL+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+c.tok[AdminUser])
		if resp, err := client.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		for _, s := range []*Process{c.etcd, c.api} {
			if s.Exited() {
				return fmt.Errorf("%s exited before the cluster was ready:\n%s", s.name, c.Logs(4000))
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kube-apiserver not ready after %s:\n%s", timeout, c.Logs(4000))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// freePorts returns n loopback ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var ports []int
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, errors.Join(errors.New("no free port"), err)
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
