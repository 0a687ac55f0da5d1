package containerdtest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// ProbePackage is the Go package of the probe program.
const ProbePackage = "github.com/kdm-project/kdm/internal/containerdtest/probe"

// builds caches each built image tar, by image name and package, for the test binary's run.
var builds sync.Map // buildKey -> *build

type buildKey struct{ name, pkg string }

type build struct {
	once sync.Once
	tar  []byte
	err  error
}

// BuildImage builds goPackage (a main package) as a static binary and writes it, as /app and the
// image's entrypoint, into a one-layer OCI image-layout tar named name (importable with Import).
// Each (name, goPackage) is built once per test binary run. It returns the tar's path, in a
// directory of t's.
func BuildImage(t testing.TB, name, goPackage string) string {
	t.Helper()
	tarBytes, err := BuildImageTar(name, goPackage)
	if err != nil {
		t.Fatalf("containerdtest: %v", err)
	}
	p := filepath.Join(t.TempDir(), "image.tar")
	if err := os.WriteFile(p, tarBytes, 0o600); err != nil {
		t.Fatalf("containerdtest: %v", err)
	}
	return p
}

// BuildImageTar is BuildImage returning the tar's bytes and its error: goPackage built as a
// static binary (CGO_ENABLED=0, -trimpath, -s -w), as /app and the entrypoint of a one-layer
// OCI image-layout tar naming the image name. Each (name, goPackage) is built once per
// process; the result is shared and must not be changed.
func BuildImageTar(name, goPackage string) ([]byte, error) {
	v, _ := builds.LoadOrStore(buildKey{name, goPackage}, &build{})
	b := v.(*build)
	b.once.Do(func() { b.tar, b.err = buildImage(name, goPackage) })
	if b.err != nil {
		return nil, fmt.Errorf("build image %s from %s: %w", name, goPackage, b.err)
	}
	return b.tar, nil
}

// ImportProbe builds the probe image and imports it as ProbeImage and as SandboxImage (the probe
// waits for SIGTERM, as a pause program does). It returns the two names.
func ImportProbe(t testing.TB, c *Containerd) (probe, sandbox string) {
	t.Helper()
	c.Import(t, BuildImage(t, ProbeImage, ProbePackage))
	c.Import(t, BuildImage(t, SandboxImage, ProbePackage))
	return ProbeImage, SandboxImage
}

func buildImage(name, pkg string) ([]byte, error) {
	dir, err := os.MkdirTemp("", "ctdimg")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	goBin, err := exec.LookPath("go")
	if err != nil {
		return nil, fmt.Errorf("the go command is needed to build the image: %w", err)
	}
	bin := filepath.Join(dir, "app")
	cmd := exec.Command(goBin, "build", "-trimpath", "-ldflags=-s -w", "-o", bin, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build: %w\n%s", err, out)
	}
	app, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	return ociArchive(name, app)
}

// ociArchive writes an OCI image layout, as a tar, of one gzip layer holding app as /app.
func ociArchive(name string, app []byte) ([]byte, error) {
	// Fixed times keep the layer's bytes, and so the image's digests, stable across builds.
	epoch := time.Unix(0, 0)
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	if err := tw.WriteHeader(&tar.Header{Name: "app", Mode: 0o755, Size: int64(len(app)), Typeflag: tar.TypeReg, ModTime: epoch}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(app); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	if _, err := zw.Write(layer.Bytes()); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	type descriptor struct {
		MediaType   string            `json:"mediaType"`
		Digest      string            `json:"digest"`
		Size        int               `json:"size"`
		Annotations map[string]string `json:"annotations,omitempty"`
	}
	config, err := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"config":       map[string]any{"Entrypoint": []string{"/app"}},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{digest(layer.Bytes())}},
	})
	if err != nil {
		return nil, err
	}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        descriptor{MediaType: "application/vnd.oci.image.config.v1+json", Digest: digest(config), Size: len(config)},
		"layers":        []descriptor{{MediaType: "application/vnd.oci.image.layer.v1.tar+gzip", Digest: digest(gz.Bytes()), Size: gz.Len()}},
	})
	if err != nil {
		return nil, err
	}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.index.v1+json",
		"manifests": []descriptor{{
			MediaType: "application/vnd.oci.image.manifest.v1+json", Digest: digest(manifest), Size: len(manifest),
			Annotations: map[string]string{"io.containerd.image.name": name, "org.opencontainers.image.ref.name": name},
		}},
	})
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	ow := tar.NewWriter(&out)
	put := func(n string, b []byte) error {
		if err := ow.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg, ModTime: epoch}); err != nil {
			return err
		}
		_, err := ow.Write(b)
		return err
	}
	if err := put("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return nil, err
	}
	for _, b := range [][]byte{gz.Bytes(), config, manifest} {
		if err := put("blobs/sha256/"+strings.TrimPrefix(digest(b), "sha256:"), b); err != nil {
			return nil, err
		}
	}
	if err := put("index.json", index); err != nil {
		return nil, err
	}
	if err := ow.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}
