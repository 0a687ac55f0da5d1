package e2e

import (
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// get fetches a kdm HTTP path and returns the status code and body; code 0 while kdm does
// not answer.
func (n *node) get(path string) (int, string) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + n.healthAddr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestReadyzWhileTheAPIServerIsUnreachable: kdm joined to an API server that does not answer
// is alive (/healthz and /livez 200) but not ready: /readyz answers 500 and ?verbose names the
// failing check, as Kubernetes components do; the device manager works meanwhile.
func TestReadyzWhileTheAPIServerIsUnreachable(t *testing.T) {
	n := newNode(t)
	kc := filepath.Join(n.base, "kubeconfig")
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["gone"] = &clientcmdapi.Cluster{Server: "https://" + freeAddr(t), InsecureSkipTLSVerify: true}
	cfg.AuthInfos["node"] = &clientcmdapi.AuthInfo{Token: "unused"}
	cfg.Contexts["gone"] = &clientcmdapi.Context{Cluster: "gone", AuthInfo: "node"}
	cfg.CurrentContext = "gone"
	if err := clientcmd.WriteToFile(*cfg, kc); err != nil {
		t.Fatal(err)
	}
	n.startPlugin()
	n.startKdm("--kubeconfig", kc, "--node-name", "unreachable-1")
	n.eventually("the device manager works without the API server", gpus(8))

	deadline := time.Now().Add(30 * time.Second)
	var last string
	for {
		hz, _ := n.get("/healthz")
		lz, _ := n.get("/livez")
		rz, body := n.get("/readyz?verbose")
		last = fmt.Sprintf("/healthz %d, /livez %d, /readyz %d:\n%s", hz, lz, rz, body)
		if hz == http.StatusOK && lz == http.StatusOK && rz == http.StatusInternalServerError &&
			strings.Contains(body, "[-]") && strings.HasSuffix(strings.TrimSpace(body), "readyz check failed") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("want alive and not ready; last: %s", last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
