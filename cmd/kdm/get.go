package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/kdm-project/kdm/agent"
	"github.com/kdm-project/kdm/agent/statusapi"
)

// getAbout is the description in `kdm get --help`.
const getAbout = `Asks a running kdm (kdm run) what it holds, as 'kubectl describe node' and 'nvidia-smi' would:

  pods       each pod's containers and the devices they hold (from podresources), with the
             pod's admission outcome (Admitted, Pending, Rejected: reason), or Terminating
             while a removed pod's containers stop (it holds its devices until they are gone)
  devices    every device: its resource, health, NUMA nodes and the pod and containers holding it
  resources  every device resource: capacity, allocatable, in use, free and unhealthy devices
  plugins    every resource's device plugin: running or stopped, its socket, and for a stopped
             one the grace period left before the resource is removed

'pods' reads the podresources socket and kdm's HTTP endpoint; the others read the HTTP
endpoint (/api/state, the status page's data). Device IDs are printed in full. -o json prints
a stable document, {"apiVersion": "kdm.get/v1", "kind": "PodList", "items": [...]} and so on:
fields are only ever added to it. Exits 1 when kdm cannot be reached.`

// getKinds are what `kdm get` lists, each with its aliases.
var getKinds = map[string]string{
	"pods": "pods", "pod": "pods", "po": "pods",
	"devices": "devices", "device": "devices", "dev": "devices",
	"resources": "resources", "resource": "resources", "res": "resources",
	"plugins": "plugins", "plugin": "plugins",
}

// getOptions are `kdm get`'s flags.
type getOptions struct {
	output, rootDir, socket, address string
	timeout                          time.Duration
}

// runGet is `kdm get`.
func runGet(args []string, stdout, stderr io.Writer) int {
	c := newCommand("kdm get", "kdm get pods|devices|resources|plugins [flags]", getAbout, stdout, stderr)
	fs := c.flags
	o := &getOptions{}
	fs.StringVarP(&o.output, "output", "o", "table", "output format: table or json")
	fs.StringVar(&o.rootDir, "root-dir", agent.DefaultRootDir, "kdm's --root-dir (`DIR`): the podresources socket is <root-dir>/pod-resources/kubelet.sock")
	fs.StringVar(&o.socket, "podresources-socket", "", "the podresources `SOCKET` (default: <root-dir>/pod-resources/kubelet.sock)")
	fs.StringVar(&o.address, "address", agent.DefaultHealthzBindAddress, "`HOST:PORT` of kdm's HTTP endpoint, as kdm run's --healthz-bind-address and --healthz-port give it (a host alone takes port 10248); also --healthz-bind-address")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Second, "give up on kdm after this long")
	// kdm run names the address --healthz-bind-address; take that name too.
	fs.SetNormalizeFunc(func(_ *pflag.FlagSet, name string) pflag.NormalizedName {
		if name == "healthz-bind-address" {
			name = "address"
		}
		return pflag.NormalizedName(name)
	})
	if code, ok := c.parse(args); !ok {
		return code
	}
	if fs.NArg() != 1 {
		if fs.NArg() == 0 {
			return c.misuse("expected what to get: pods, devices, resources or plugins")
		}
		return c.misuse("expected one of pods, devices, resources or plugins, got %d arguments: %s", fs.NArg(), quoteArgs(fs.Args()))
	}
	kind, ok := getKinds[fs.Arg(0)]
	if !ok {
		return c.misuse("cannot get %q: want pods, devices, resources or plugins", fs.Arg(0))
	}
	if o.output != "table" && o.output != "json" {
		return c.misuse("--output %q: want table or json", o.output)
	}
	if o.timeout <= 0 {
		return c.misuse("--timeout must be positive, got %v", o.timeout)
	}
	if o.socket == "" {
		o.socket = filepath.Join(o.rootDir, "pod-resources", "kubelet.sock")
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	list, err := o.get(ctx, kind, stderr)
	if err != nil {
		return c.fail("%v", err)
	}
	if o.output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(list); err != nil {
			return c.fail("%v", err)
		}
		return exitOK
	}
	list.printTable(stdout)
	return exitOK
}

// get asks kdm for kind. For pods, an unreachable HTTP endpoint is reported on stderr and the
// pods are listed from podresources alone.
func (o *getOptions) get(ctx context.Context, kind string, stderr io.Writer) (getList, error) {
	if kind != "pods" {
		st, err := fetchState(ctx, o.address)
		if err != nil {
			return nil, err
		}
		switch kind {
		case "devices":
			return newDeviceList(st), nil
		case "resources":
			return newResourceList(st), nil
		default:
			return newPluginList(st), nil
		}
	}
	pr, err := listPodResources(ctx, o.socket)
	if err != nil {
		return nil, err
	}
	st, err := fetchState(ctx, o.address)
	if err != nil {
		fmt.Fprintf(stderr, "kdm get: admission outcomes unknown, listing podresources alone: %v\n", err)
		st = nil
	}
	return newPodList(pr, st), nil
}

// fetchState reads kdm's /api/state from address (host:port, a host alone, or a URL).
func fetchState(ctx context.Context, address string) (*statusapi.PageState, error) {
	base := address
	if !strings.Contains(base, "://") {
		if _, _, err := net.SplitHostPort(base); err != nil {
			base = net.JoinHostPort(strings.Trim(base, "[]"), fmt.Sprint(defaultHealthzPort))
		}
		base = "http://" + base
	}
	url := strings.TrimSuffix(base, "/") + "/api/state"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("--address %q: %w", address, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("asking kdm at %s: %w (is kdm running, and serving there? see its --healthz-bind-address and --healthz-port)", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("asking kdm at %s: %s", url, resp.Status)
	}
	var st statusapi.PageState
	if err := json.NewDecoder(io.LimitReader(resp.Body, 256<<20)).Decode(&st); err != nil {
		return nil, fmt.Errorf("reading kdm's answer from %s: %w", url, err)
	}
	return &st, nil
}

// listPodResources calls the podresources v1 List on the unix socket at path.
func listPodResources(ctx context.Context, path string) (*podresourcesv1.ListPodResourcesResponse, error) {
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("podresources socket %s: %w", path, err)
	}
	defer func() { _ = conn.Close() }()
	resp, err := podresourcesv1.NewPodResourcesListerClient(conn).List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("listing pods through podresources at %s: %w (is kdm running with this --root-dir? --podresources-socket names the socket)", path, err)
	}
	return resp, nil
}
