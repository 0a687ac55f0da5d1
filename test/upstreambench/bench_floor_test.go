package upstreambench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/checkpoint"
	"github.com/kdm-project/kdm/test/upstreambench/suite"
)

// BenchmarkFloor measures, in the same run as the managers, a lower bound of each row's op:
// only what the op must do, the cheapest way there is, and nothing else. cmd/benchcompare
// prints every kdm row as a multiple of its floor (floorRules there). Every floor talks to the
// same plugin stub as its row, with the row's device count (the stub builds a map of all its
// devices on every Allocate, which every manager waits for), receives the plugin's messages
// without decoding them (rawCodec), and writes the checkpoint as inPlace does: only the bytes
// the op must change, overwritten in place in a spare of the same size, fdatasync, an
// exchange of names, and the directory's fsync where the row's durability needs it. No floor
// computes a checksum: how little of its text a manager can hash is the manager's design, so
// no measured checksum is a lower bound.
//
//   - allocate+entry,pods=K[,departs=O] (Allocate/pods=K[,departs=O]): the plugin's Allocate
//     from a stub of K+1 devices, and the replacement of that row's checkpoint (K+1 pods of one
//     device) changing one entry, the arriving pod's, where the departed pod's entry was (the
//     last for departs=newest, the oldest's for departs=oldest, one drawn at random for
//     departs=random), and the checksum's digits, with the directory's fsync: Allocate's
//     result must survive a power cut.
//   - allocate+entry,beside=N (AllocateBeside/devices=N): the same with that row's stub of one
//     device, in a checkpoint that also lists N registered devices of the large resource.
//   - listandwatch+write,devices=N (ListAndWatchUpdate/devices=N under the kubelet's
//     policy): the same plugin (in a process of its own from KubeletMaxDevices up, as there)
//     sends the same lists to a receiver, which after each list, on the stream, changes the
//     flipped device's place in the registered devices and the checksum, without a directory
//     fsync (a health flip's write changes nothing a restart reads). The op ends when the list
//     has arrived, as the managers announce a list before they write it.
//   - listandwatch,devices=1000 (the kdm-policy row, whose write runs off the stream): the
//     transport alone.
//   - restart,devices=1000,pods=250 (Restart): the checkpoint read from disk, and the plugin
//     serving again, registering with a receiver that connects back and takes its first list.
//
// The Checkpoint* rows have no floor; BenchmarkReference measures what they are compared with.
func BenchmarkFloor(b *testing.B) {
	for _, k := range []int{0, 100, 1000, 10000} {
		orders := []string{suite.DepartsNewest, suite.DepartsOldest, suite.DepartsRandom}
		if k == 0 {
			orders = []string{""}
		}
		for _, order := range orders {
			name := fmt.Sprintf("allocate+entry,pods=%d", k)
			if order != "" {
				name += ",departs=" + order
			}
			b.Run(name, func(b *testing.B) {
				allocateFloor(b, kdmData(suite.CheckpointData(b, k+1, 1, k+1, false)), k+1, departures(order, k+1))
			})
		}
	}
	for _, n := range []int{suite.KubeletMaxDevices(), suite.LargeDevices} {
		b.Run(fmt.Sprintf("allocate+entry,beside=%d", n), func(b *testing.B) {
			d := kdmData(suite.CheckpointData(b, 1, 1, 1, false))
			d.RegisteredDevices[suite.LargeResource] = kdmData(suite.CheckpointData(b, 0, 0, n, false)).RegisteredDevices[suite.ResourceName]
			allocateFloor(b, d, 1, departures("", 1))
		})
	}
	for _, n := range []int{1000, suite.KubeletMaxDevices(), suite.LargeDevices} {
		b.Run(fmt.Sprintf("listandwatch+write,devices=%d", n), func(b *testing.B) { listAndWatchFloor(b, n, true) })
	}
	b.Run("listandwatch,devices=1000", func(b *testing.B) { listAndWatchFloor(b, 1000, false) })
	b.Run("restart,"+suite.RestartCase, func(b *testing.B) {
		dir := suite.ShortDir(b)
		suite.SeedCheckpoint(b, dir, suite.CheckpointData(b, suite.RestartPods, suite.RestartPerPod, suite.RestartPods*suite.RestartPerPod, false))
		r := startReceiver(b, dir, nil)
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
}

// allocateFloor is the floor of an Allocate op on checkpoint d through a stub of devices
// devices: the plugin's Allocate, then one entry (the one slot returns, per op) and the
// checksum overwritten, fdatasync, exchange, directory fsync.
func allocateFloor(b *testing.B, d *checkpoint.Data, devices int, slot func() int) {
	enc := encode(b, d)
	l := mustLayout(b, enc)
	dir := suite.ShortDir(b)
	c, w := allocateRPC(b, dir, devices), newInPlace(b, dir, enc)
	for b.Loop() {
		c()
		if err := w.write(true, l.entries[slot()], l.checksum); err != nil {
			b.Fatal(err)
		}
	}
	reportFile(b, enc)
	reportWritten(b, l.entries[0], l.checksum)
}

// departures returns, per op, the place in a checkpoint of n entries of the entry that left
// in the departure order: the last for DepartsNewest ("" too: the previous op's pod, at
// pods=0 the only one), the oldest's (each place in turn) for DepartsOldest, a place drawn
// at random for DepartsRandom. The arriving entry takes that place.
func departures(order string, n int) func() int {
	switch order {
	case suite.DepartsOldest:
		i := -1
		return func() int { i = (i + 1) % n; return i }
	case suite.DepartsRandom:
		r := rand.New(rand.NewPCG(uint64(n), 0x5eed))
		return func() int { return r.IntN(n) }
	default:
		return func() int { return n - 1 }
	}
}

// listAndWatchFloor is the floor of ListAndWatchUpdate/devices=n: the plugin's lists,
// alternately with device 0 unhealthy and healthy, taken by a receiver; with write, each
// followed on the stream by the write of the checkpoint of one pod on device 0 with n
// registered devices, changing device 0's place in the registered devices and the checksum
// (fdatasync and exchange, no directory fsync).
func listAndWatchFloor(b *testing.B, n int, write bool) {
	dir := suite.ShortDir(b)
	var afterList func()
	var enc []byte
	if write {
		enc = encode(b, kdmData(suite.CheckpointData(b, 1, 1, n, false)))
		l := mustLayout(b, enc)
		dev, err := l.device(enc, suite.DeviceID(0))
		if err != nil {
			b.Fatal(err)
		}
		w := newInPlace(b, dir, enc)
		afterList = func() { // on the receiver's stream: b.Error, not b.Fatal
			if err := w.write(false, dev, l.checksum); err != nil {
				b.Error(err)
			}
		}
		defer reportWritten(b, dev, l.checksum)
	}
	r := startReceiver(b, dir, afterList)
	var send func(i int64)
	if n < suite.KubeletMaxDevices() {
		s := suite.StartPlugin(b, dir, suite.DeviceList(n)).S
		healthy, flipped := suite.DeviceList(n), suite.DeviceList(n)
		flipped[0].Health = pluginapi.Unhealthy
		send = func(i int64) {
			if i%2 == 0 {
				s.Update(flipped)
			} else {
				s.Update(healthy)
			}
		}
	} else {
		p := suite.StartPluginProcess(b, dir, suite.ResourceName, n)
		r.wait(b, 1)
		p.Prepare(b, suite.DeviceID(0))
		send = func(i int64) {
			if i%2 == 0 {
				p.Send(b, "flip")
			} else {
				p.Send(b, "heal")
			}
		}
	}
	r.wait(b, 1) // the first list
	i := int64(0)
	for b.Loop() {
		send(i)
		r.wait(b, i+2)
		i++
	}
	if write {
		reportFile(b, enc)
	}
}

// allocateRPC returns a function making the call every Allocate op of a row makes: the
// plugin stub's Allocate of one device, from a stub of devices devices (the stub builds a map
// of all its devices on every Allocate, which every manager waits for), answered as in the
// managers' benchmarks and received without decoding (rawCodec). The stub serves dir and
// registers with a receiver there, as in the benchmarks; its inotify watch on dir then sees
// every file later written there, as it sees a manager's checkpoint writes.
func allocateRPC(b *testing.B, dir string, devices int) func() {
	b.Helper()
	r := startReceiver(b, dir, nil)
	suite.StartPlugin(b, dir, suite.DeviceList(devices))
	r.wait(b, 1)
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, suite.PluginSocketName),
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{})))
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

// rawCodec is gRPC's proto codec for what a floor sends, and receives a message without
// decoding it: the least a manager can do with a plugin's answer is take its bytes.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return encoding.GetCodecV2("proto").Marshal(v)
}

func (rawCodec) Unmarshal(mem.BufferSlice, any) error { return nil }

// receiver is the transport of a device manager and nothing else: it serves kubelet.sock,
// and for every plugin that registers it connects back, opens ListAndWatch and counts the
// lists it receives, without decoding them (rawCodec). After each list it signals, then runs
// afterList (if set) on the stream before it takes the next list, as a manager writes its
// checkpoint on the plugin's stream after announcing the list.
type receiver struct {
	afterList func()
	pluginapi.UnimplementedRegistrationServer
	dir      string
	received atomic.Int64
	signal   chan struct{}
	ctx      context.Context
	streams  sync.WaitGroup
}

// startReceiver serves a receiver on dir/kubelet.sock until tb's cleanup; afterList may be nil.
func startReceiver(b *testing.B, dir string, afterList func()) *receiver {
	b.Helper()
	lis, err := net.Listen("unix", filepath.Join(dir, suite.KubeletSocketName))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &receiver{afterList: afterList, dir: dir, signal: make(chan struct{}, 1), ctx: ctx}
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
	stream, err := pluginapi.NewDevicePluginClient(conn).ListAndWatch(r.ctx, &pluginapi.Empty{}, grpc.ForceCodecV2(rawCodec{}))
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
			if r.afterList != nil {
				r.afterList()
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
