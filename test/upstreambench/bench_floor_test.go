package upstreambench

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/checkpoint"
	"github.com/kdm-project/kdm/test/upstreambench/suite"
)

// BenchmarkFloor measures, in the same run as the managers, what no device manager can go
// below for each benchmark: the transport and the disk work its op cannot avoid, and nothing
// else. cmd/benchcompare prints every kdm row as a multiple of its floor.
//
//   - rpc: one empty unary gRPC round trip over a unix socket.
//   - allocate: the round trip every Allocate op makes: the plugin stub's Allocate of one
//     device, with the response the managers receive (see allocateRPC).
//   - rpc+newfile: rpc and a 64-byte durable replacement through a new file (write, fsync,
//     rename, directory fsync), the way the kubelet writes plus the directory fsync; kept for
//     comparison with earlier tables.
//   - rpc+overwrite,pods=K: allocate and the durable replacement of a file as large as the
//     checkpoint of Allocate/pods=K (K+1 pods of one device), the cheapest way there is:
//     overwrite a preallocated file of that size, fdatasync it, exchange its name with the
//     checkpoint's (renameat2 RENAME_EXCHANGE, as kdm's store does) and fsync the directory.
//     The file is in the directory the stub serves and has an inotify watch on, as a manager's
//     checkpoint is.
//   - checksum+overwrite,devices=N: the kubelet's checksum of the checkpoint of
//     ListAndWatchUpdate/devices=N (one pod, N registered devices; computed by kdm's emitter,
//     the fastest there is) and its durable replacement as above. Under the kubelet's policy
//     every device-list update rehashes and writes the registered devices.
//   - rpc+checksum+overwrite,beside=N: the same for AllocateBeside/devices=N's checkpoint,
//     with allocate, in the stub's directory.
//   - listandwatch,devices=N: the transport of ListAndWatchUpdate/devices=N: the same plugin
//     (in a process of its own from KubeletMaxDevices up, as there) sends the same lists to a
//     receiver that only decodes them; the op ends at the receiver's signal.
//   - restart,devices=1000,pods=250: the transport and reading of Restart: the checkpoint of
//     250 pods read from disk, and the plugin serving again, registering with a receiver that
//     connects back and takes its first list.
//   - checksum,pods=1000,devices=4 and checksum+overwrite,pods=1000,devices=4: the checksum of
//     the Checkpoint* rows' data, and with its durable replacement.
func BenchmarkFloor(b *testing.B) {
	b.Run("rpc", func(b *testing.B) {
		c := emptyRPC(b)
		for b.Loop() {
			c()
		}
	})
	b.Run("allocate", func(b *testing.B) {
		c := allocateRPC(b, suite.ShortDir(b))
		for b.Loop() {
			c()
		}
	})
	b.Run("rpc+newfile", func(b *testing.B) {
		c, w := emptyRPC(b), newFileWrite(b, make([]byte, 64))
		for b.Loop() {
			c()
			w()
		}
	})
	for _, k := range []int{0, 100, 1000, 10000} {
		b.Run(fmt.Sprintf("rpc+overwrite,pods=%d", k), func(b *testing.B) {
			d := kdmData(suite.CheckpointData(b, k+1, 1, k+1, false))
			enc := encode(b, d)
			dir := suite.ShortDir(b)
			c, w := allocateRPC(b, dir), overwrite(b, dir, enc)
			for b.Loop() {
				c()
				w()
			}
			reportFile(b, enc)
		})
	}
	for _, n := range []int{1000, suite.KubeletMaxDevices(), suite.LargeDevices} {
		b.Run(fmt.Sprintf("checksum+overwrite,devices=%d", n), func(b *testing.B) {
			d := kdmData(suite.CheckpointData(b, 1, 1, n, false))
			enc := encode(b, d)
			w := overwrite(b, suite.ShortDir(b), enc)
			for b.Loop() {
				checkpoint.Checksum(d)
				w()
			}
			reportFile(b, enc)
		})
	}
	for _, n := range []int{suite.KubeletMaxDevices(), suite.LargeDevices} {
		b.Run(fmt.Sprintf("rpc+checksum+overwrite,beside=%d", n), func(b *testing.B) {
			d := kdmData(suite.CheckpointData(b, 1, 1, 1, false))
			d.RegisteredDevices[suite.LargeResource] = kdmData(suite.CheckpointData(b, 0, 0, n, false)).RegisteredDevices[suite.ResourceName]
			enc := encode(b, d)
			dir := suite.ShortDir(b)
			c, w := allocateRPC(b, dir), overwrite(b, dir, enc)
			for b.Loop() {
				c()
				checkpoint.Checksum(d)
				w()
			}
			reportFile(b, enc)
		})
	}
	b.Run("listandwatch,devices=1000", func(b *testing.B) {
		const n = 1000
		dir := suite.ShortDir(b)
		r := startReceiver(b, dir)
		s := suite.StartPlugin(b, dir, suite.DeviceList(n)).S
		r.wait(b, 1) // the first list
		healthy, flipped := suite.DeviceList(n), suite.DeviceList(n)
		flipped[0].Health = pluginapi.Unhealthy
		i := int64(0)
		for b.Loop() {
			list := flipped
			if i%2 == 1 {
				list = healthy
			}
			s.Update(list)
			r.wait(b, i+2)
			i++
		}
	})
	for _, n := range []int{suite.KubeletMaxDevices(), suite.LargeDevices} {
		b.Run(fmt.Sprintf("listandwatch,devices=%d", n), func(b *testing.B) {
			dir := suite.ShortDir(b)
			r := startReceiver(b, dir)
			p := suite.StartPluginProcess(b, dir, suite.ResourceName, n)
			r.wait(b, 1)
			p.Prepare(b, suite.DeviceID(0))
			i := int64(0)
			for b.Loop() {
				if i%2 == 0 {
					p.Send(b, "flip")
				} else {
					p.Send(b, "heal")
				}
				r.wait(b, i+2)
				i++
			}
		})
	}
	b.Run("restart,"+suite.RestartCase, func(b *testing.B) {
		dir := suite.ShortDir(b)
		suite.SeedCheckpoint(b, dir, suite.CheckpointData(b, suite.RestartPods, suite.RestartPerPod, suite.RestartPods*suite.RestartPerPod, false))
		r := startReceiver(b, dir)
		p := suite.StartPlugin(b, dir, suite.DeviceList(suite.RestartPods*suite.RestartPerPod))
		r.wait(b, 1)
		lists := int64(1)
		for b.Loop() {
			if _, err := os.ReadFile(filepath.Join(dir, suite.CheckpointFile)); err != nil {
				b.Fatal(err)
			}
			if err := p.Restart(); err != nil {
				b.Fatal(err)
			}
			lists++
			r.wait(b, lists)
		}
	})
	b.Run("checksum,"+suite.CheckpointCase, func(b *testing.B) {
		d := kdmData(suite.CheckpointBenchData(b))
		for b.Loop() {
			checkpoint.Checksum(d)
		}
	})
	b.Run("checksum+overwrite,"+suite.CheckpointCase, func(b *testing.B) {
		d := kdmData(suite.CheckpointBenchData(b))
		enc := encode(b, d)
		w := overwrite(b, suite.ShortDir(b), enc)
		for b.Loop() {
			checkpoint.Checksum(d)
			w()
		}
		reportFile(b, enc)
	})
}

// encode is d's checkpoint file.
func encode(b *testing.B, d *checkpoint.Data) []byte {
	b.Helper()
	enc, err := checkpoint.Encode(d)
	if err != nil {
		b.Fatal(err)
	}
	return enc
}

// reportFile adds the size of the file written to b's results (after the loop: b.Loop's
// start deletes metrics reported before it).
func reportFile(b *testing.B, enc []byte) { b.ReportMetric(float64(len(enc))/(1<<20), "file-MiB") }

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

// allocateRPC returns a function making the call every Allocate op makes: the plugin stub's
// Allocate of one device, answered as in the managers' benchmarks, and decoded with gRPC's
// standard codec. The stub serves dir and registers with a receiver there, as in the
// benchmarks; its inotify watch on dir then sees every file later written there, as it sees a
// manager's checkpoint writes.
func allocateRPC(b *testing.B, dir string) func() {
	b.Helper()
	r := startReceiver(b, dir)
	suite.StartPlugin(b, dir, suite.DeviceList(1))
	r.wait(b, 1)
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, suite.PluginSocketName), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close() })
	client := pluginapi.NewDevicePluginClient(conn)
	req := &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{suite.DeviceID(0)}}}}
	call := func() {
		if _, err := client.Allocate(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
	call() // connect outside the timed loop
	return call
}

// receiver is the transport of a device manager and nothing else: it serves kubelet.sock,
// and for every plugin that registers it connects back, opens ListAndWatch and counts the
// lists it receives, decoding each with gRPC's standard codec and doing nothing with it.
type receiver struct {
	pluginapi.UnimplementedRegistrationServer
	dir      string
	received atomic.Int64
	signal   chan struct{}
	ctx      context.Context
	streams  sync.WaitGroup
}

// startReceiver serves a receiver on dir/kubelet.sock until tb's cleanup.
func startReceiver(b *testing.B, dir string) *receiver {
	b.Helper()
	lis, err := net.Listen("unix", filepath.Join(dir, suite.KubeletSocketName))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &receiver{dir: dir, signal: make(chan struct{}, 1), ctx: ctx}
	srv := grpc.NewServer()
	pluginapi.RegisterRegistrationServer(srv, r)
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(lis) }()
	b.Cleanup(func() { cancel(); srv.Stop(); <-served; r.streams.Wait() })
	return r
}

// Register connects to the plugin and receives its lists on a goroutine, until the plugin's
// stream ends or the receiver stops.
func (r *receiver) Register(_ context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	conn, err := grpc.NewClient("unix://"+filepath.Join(r.dir, req.Endpoint),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20))) // kdm's limit
	if err != nil {
		return nil, err
	}
	stream, err := pluginapi.NewDevicePluginClient(conn).ListAndWatch(r.ctx, &pluginapi.Empty{})
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	r.streams.Add(1)
	go func() {
		defer r.streams.Done()
		defer func() { _ = conn.Close() }()
		for {
			if _, err := stream.Recv(); err != nil {
				return
			}
			r.received.Add(1)
			select {
			case r.signal <- struct{}{}:
			default:
			}
		}
	}()
	return &pluginapi.Empty{}, nil
}

// wait blocks until want lists in all have been received, as suite.WaitUpdated waits for a
// manager: on a signal, without spinning. After 30 s without them it fails b.
func (r *receiver) wait(b *testing.B, want int64) {
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	for r.received.Load() < want {
		select {
		case <-r.signal:
		case <-deadline.C:
			b.Fatalf("%d lists received after 30s, want %d", r.received.Load(), want)
		}
	}
}

// newFileWrite returns a function replacing a file with data through a new file: write a
// temporary file, fsync it, rename it over the file and fsync the directory.
func newFileWrite(b *testing.B, data []byte) func() {
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
		if err := d.Sync(); err != nil {
			b.Fatal(err)
		}
	}
}

// overwrite returns a function durably replacing a file in dir with data with the least work
// there is: two files of data's size are written and synced beforehand; each call overwrites
// the one not at the file's name from its start, fdatasyncs it, exchanges the two names
// (renameat2 RENAME_EXCHANGE) and fsyncs the directory. Both stay open.
func overwrite(b *testing.B, dir string, data []byte) func() {
	b.Helper()
	path, spare := filepath.Join(dir, "floor"), filepath.Join(dir, ".floor.spare")
	var files [2]*os.File
	for i, p := range []string{path, spare} {
		f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = f.Close() })
		if _, err := f.Write(data); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
		files[i] = f
	}
	d, err := os.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = d.Close() })
	if err := d.Sync(); err != nil {
		b.Fatal(err)
	}
	next := files[1] // the file at the spare's name
	return func() {
		if _, err := next.WriteAt(data, 0); err != nil {
			b.Fatal(err)
		}
		if err := unix.Fdatasync(int(next.Fd())); err != nil {
			b.Fatal(err)
		}
		if err := unix.Renameat2(unix.AT_FDCWD, spare, unix.AT_FDCWD, path, unix.RENAME_EXCHANGE); err != nil {
			b.Fatal(err)
		}
		if err := d.Sync(); err != nil {
			b.Fatal(err)
		}
		if next == files[0] {
			next = files[1]
		} else {
			next = files[0]
		}
	}
}
