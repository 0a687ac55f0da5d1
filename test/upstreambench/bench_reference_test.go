package upstreambench

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/checkpoint"
	"github.com/kdm-project/kdm/test/upstreambench/suite"
)

// BenchmarkReference measures, in the same run as the managers, work that a row's op may or
// may not need, depending on the manager's design: none of it is a lower bound, and
// cmd/benchcompare prints it apart from the floors, without a ratio.
//
//   - rpc: one empty unary gRPC round trip over a unix socket (a bare server).
//   - allocate+wholefile,pods=K: the Allocate floor's call (a stub of K+1 devices) and the
//     whole checkpoint of Allocate/pods=K rewritten in place in the spare, fdatasync,
//     exchange, directory fsync: what a write that rewrites every byte costs at that size.
//   - allocate+checksum+wholefile,beside=N: the same for AllocateBeside/devices=N's
//     checkpoint, with the kubelet's checksum of it computed from scratch by kdm's emitter.
//   - checksum,pods=1000,devices=4 and checksum+wholefile,pods=1000,devices=4: the Checkpoint
//     rows' checksum computed from scratch by kdm's emitter, and with the whole file's
//     replacement as above. The Churn rows' ops change one entry of it.
func BenchmarkReference(b *testing.B) {
	b.Run("rpc", func(b *testing.B) {
		c := emptyRPC(b)
		for b.Loop() {
			c()
		}
	})
	for _, k := range []int{0, 100, 1000, 10000} {
		b.Run(fmt.Sprintf("allocate+wholefile,pods=%d", k), func(b *testing.B) {
			wholeFileReference(b, kdmData(suite.CheckpointData(b, k+1, 1, k+1, false)), k+1, false)
		})
	}
	for _, n := range []int{suite.KubeletMaxDevices(), suite.LargeDevices} {
		b.Run(fmt.Sprintf("allocate+checksum+wholefile,beside=%d", n), func(b *testing.B) {
			d := kdmData(suite.CheckpointData(b, 1, 1, 1, false))
			d.RegisteredDevices[suite.LargeResource] = kdmData(suite.CheckpointData(b, 0, 0, n, false)).RegisteredDevices[suite.ResourceName]
			wholeFileReference(b, d, 1, true)
		})
	}
	b.Run("checksum,"+suite.CheckpointCase, func(b *testing.B) {
		d := kdmData(suite.CheckpointBenchData(b))
		for b.Loop() {
			checkpoint.Checksum(d)
		}
	})
	b.Run("checksum+wholefile,"+suite.CheckpointCase, func(b *testing.B) {
		wholeFileReference(b, kdmData(suite.CheckpointBenchData(b)), 0, true)
	})
}

// wholeFileReference times, per op, the plugin's Allocate through a stub of devices devices
// (none when 0), with checksum kdm's checksum of d, and the replacement of d's whole file.
func wholeFileReference(b *testing.B, d *checkpoint.Data, devices int, checksum bool) {
	enc := encode(b, d)
	dir := suite.ShortDir(b)
	c := func() {}
	if devices > 0 {
		c = allocateRPC(b, dir, devices)
	}
	w := newInPlace(b, dir, enc)
	for b.Loop() {
		c()
		if checksum {
			checkpoint.Checksum(d)
		}
		if err := w.write(true, w.whole()); err != nil {
			b.Fatal(err)
		}
	}
	reportFile(b, enc)
	reportWritten(b, w.whole())
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
