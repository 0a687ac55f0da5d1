package upstreambench

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	stub "k8s.io/kubernetes/pkg/kubelet/cm/devicemanager/plugin/v1beta1"

	"github.com/kdm-project/kdm/checkpoint"
	"github.com/kdm-project/kdm/test/upstreambench/suite"
)

// BenchmarkFloor measures, in the same run as the managers, what no device manager can go
// below: one empty unary gRPC round trip over a unix socket (every Allocate makes one) and
// one small durable file replacement (write, fsync, rename, directory fsync; every
// checkpoint write is one). "rpc+write" is one of each. "write,no-dir-fsync" leaves out the
// directory fsync, as the kubelet's checkpoint manager does.
func BenchmarkFloor(b *testing.B) {
	b.Run("rpc", func(b *testing.B) {
		c := emptyRPC(b)
		for b.Loop() {
			c()
		}
	})
	b.Run("write", func(b *testing.B) {
		w := smallWrite(b, true)
		for b.Loop() {
			w()
		}
	})
	b.Run("write,no-dir-fsync", func(b *testing.B) {
		w := smallWrite(b, false)
		for b.Loop() {
			w()
		}
	})
	b.Run("rpc+write", func(b *testing.B) {
		c, w := emptyRPC(b), smallWrite(b, true)
		for b.Loop() {
			c()
			w()
		}
	})
	b.Run("listandwatch,devices=1000", func(b *testing.B) {
		// The transport of BenchmarkListAndWatchUpdate alone: the same plugin stub sends the
		// same lists, and a receiver that does nothing with them decodes each with gRPC's
		// standard codec; the op ends when the list has been received, seen the way the
		// managers' ops are seen: by a loop spinning on a counter, yielding between reads.
		const n = 1000
		sock := filepath.Join(suite.ShortDir(b), "gpu.sock")
		s := stub.NewDevicePluginStub(logr.Discard(), suite.DeviceList(n), sock, suite.ResourceName, false, false)
		if err := s.Start(context.Background()); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Stop(logr.Discard()) })
		received := noopReceiver(b, sock)
		waitCount(b, received, 1) // the first list
		healthy, flipped := suite.DeviceList(n), suite.DeviceList(n)
		flipped[0].Health = pluginapi.Unhealthy
		i := int64(0)
		for b.Loop() {
			list := flipped
			if i%2 == 1 {
				list = healthy
			}
			s.Update(list)
			waitCount(b, received, i+2)
			i++
		}
	})
	b.Run("write,pods=10000", func(b *testing.B) {
		// The checkpoint of Allocate/pods=10000 (10,000 pods of one device, all registered),
		// durably written as raw bytes: what that benchmark's one write per op costs on this
		// disk before any encoding.
		enc, err := checkpoint.Encode(kdmData(suite.CheckpointData(b, 10000, 1, 10001, false)))
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(len(enc))/(1<<20), "MiB")
		w := fileWrite(b, enc, true)
		for b.Loop() {
			w()
		}
	})
}

// optionsServer answers GetDevicePluginOptions with empty options and nothing else.
type optionsServer struct {
	pluginapi.UnimplementedDevicePluginServer
}

func (optionsServer) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

// emptyRPC serves optionsServer on a unix socket and returns a function making one call.
func emptyRPC(b *testing.B) func() {
	b.Helper()
	sock := filepath.Join(suite.ShortDir(b), "floor.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, optionsServer{})
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close(); srv.Stop(); <-served })
	client := pluginapi.NewDevicePluginClient(conn)
	call := func() {
		if _, err := client.GetDevicePluginOptions(context.Background(), &pluginapi.Empty{}); err != nil {
			b.Fatal(err)
		}
	}
	call() // connect outside the timed loop
	return call
}

// noopReceiver opens a ListAndWatch stream to the plugin at sock and counts the messages
// received, doing nothing else with them.
func noopReceiver(b *testing.B, sock string) *atomic.Int64 {
	b.Helper()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := pluginapi.NewDevicePluginClient(conn).ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		b.Fatal(err)
	}
	var received atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			if _, err := stream.Recv(); err != nil {
				return
			}
			received.Add(1)
		}
	}()
	b.Cleanup(func() { cancel(); _ = conn.Close(); <-done })
	return &received
}

// waitCount spins, as waitAllocatable does, until c reaches want.
func waitCount(tb testing.TB, c *atomic.Int64, want int64) {
	suite.SpinUntil(tb, func() bool { return c.Load() >= want },
		func() string { return fmt.Sprintf("%d lists received after 30s, want %d", c.Load(), want) })
}

// smallWrite returns a function replacing a 64-byte file: write a temporary file, fsync it,
// rename it over the file and, with dirSync, fsync the directory.
func smallWrite(b *testing.B, dirSync bool) func() { return fileWrite(b, make([]byte, 64), dirSync) }

// fileWrite is smallWrite for a file holding data.
func fileWrite(b *testing.B, data []byte, dirSync bool) func() {
	b.Helper()
	dir := suite.ShortDir(b)
	d, err := os.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = d.Close() })
	path, tmp := filepath.Join(dir, "floor"), filepath.Join(dir, ".floor.tmp")
	return func() {
		f, err := os.Create(tmp)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := f.Write(data); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			b.Fatal(err)
		}
		if !dirSync {
			return
		}
		if err := d.Sync(); err != nil {
			b.Fatal(err)
		}
	}
}
