package containerdtest

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"
	cri "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestProbeInContainer runs the probe in a sandbox of its own image through CRI and reads its
// report: the environment, a device node, a read-only mount and a write all arrive.
func TestProbeInContainer(t *testing.T) {
	c := Start(t)
	probe, _ := ImportProbe(t, c)
	rt := c.Dial(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	out, ro, logs := t.TempDir(), t.TempDir(), t.TempDir()
	sc := &cri.PodSandboxConfig{
		Metadata:     &cri.PodSandboxMetadata{Name: "p", Namespace: "default", Uid: "uid-p"},
		LogDirectory: logs,
		Linux: &cri.LinuxPodSandboxConfig{SecurityContext: &cri.LinuxSandboxSecurityContext{
			NamespaceOptions: &cri.NamespaceOption{Network: cri.NamespaceMode_NODE}}},
	}
	sb, err := rt.RunPodSandbox(ctx, &cri.RunPodSandboxRequest{Config: sc})
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	cc, err := rt.CreateContainer(ctx, &cri.CreateContainerRequest{PodSandboxId: sb.PodSandboxId, SandboxConfig: sc, Config: &cri.ContainerConfig{
		Metadata: &cri.ContainerMetadata{Name: "c"},
		Image:    &cri.ImageSpec{Image: probe},
		Envs: []*cri.KeyValue{
			{Key: "PROBE_OUT", Value: []byte("/out/report")},
			{Key: "PROBE_WRITE", Value: []byte("/dev/kdmtest0,/ro/x")},
			{Key: "HELLO", Value: []byte("world")},
		},
		Devices: []*cri.Device{{HostPath: "/dev/null", ContainerPath: "/dev/kdmtest0", Permissions: "rwm"}},
		Mounts: []*cri.Mount{
			{HostPath: out, ContainerPath: "/out"},
			{HostPath: ro, ContainerPath: "/ro", Readonly: true},
		},
		LogPath: "c.log",
	}})
	if err != nil {
		t.Fatalf("CreateContainer: %v", err)
	}
	if err := os.WriteFile(filepath.Join(ro, "x"), nil, 0o666); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.StartContainer(ctx, &cri.StartContainerRequest{ContainerId: cc.ContainerId}); err != nil {
		t.Fatalf("StartContainer: %v", err)
	}
	r := WaitProbe(t, filepath.Join(out, "report"), 30*time.Second)
	if v, _ := r.Env("HELLO"); v != "world" {
		t.Errorf("HELLO = %q, want world", v)
	}
	if d, ok := r.Device("/dev/kdmtest0"); !ok || d.Type != "c" || d.Major != 1 || d.Minor != 3 {
		t.Errorf("device /dev/kdmtest0 = %+v (found %v), want char 1:3", d, ok)
	}
	if w, _ := r.Write("/dev/kdmtest0"); !w.OK {
		t.Errorf("write /dev/kdmtest0: %+v, want ok", w)
	}
	if w, _ := r.Write("/ro/x"); w.OK {
		t.Errorf("write /ro/x succeeded on a read-only mount")
	}
	if m, ok := r.Mount("/ro"); !ok || !m.ReadOnly() {
		t.Errorf("mount /ro = %+v (found %v), want read-only", m, ok)
	}
}

func TestOCIArchiveStable(t *testing.T) {
	a, err := ociArchive("kdm.test/x:1", []byte("app"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := ociArchive("kdm.test/x:1", []byte("app"))
	if err != nil {
		t.Fatal(err)
	}
	if string(a) != string(b) {
		t.Error("the same image built twice differs")
	}
}
