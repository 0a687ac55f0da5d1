package endpoint

import (
	"context"
	"errors"
	"io"
	"strconv"
	"testing"

	"google.golang.org/protobuf/proto"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// BenchmarkListAndWatchMessage measures one ListAndWatch message of n devices from the plugin's
// Send to Run's callback, over a real unix socket.
func BenchmarkListAndWatchMessage(b *testing.B) {
	for _, n := range []int{1000} {
		b.Run("devices="+strconv.Itoa(n), func(b *testing.B) {
			msg := &pluginapi.ListAndWatchResponse{Devices: manyDevices(n)}
			p := newStubPlugin()
			count := make(chan int, 1)
			p.listAndWatch = func(s pluginapi.DevicePlugin_ListAndWatchServer) error {
				for range <-count {
					if err := s.Send(msg); err != nil {
						return err
					}
				}
				return nil
			}
			e := dialStub(b, p, Config{})
			b.SetBytes(int64(proto.Size(msg)))
			b.ReportAllocs()
			b.ResetTimer()
			count <- b.N
			received := 0
			err := e.Run(context.Background(), func(d []*pluginapi.Device) {
				if len(d) != n {
					b.Errorf("message of %d devices, want %d", len(d), n)
				}
				received++
			})
			b.StopTimer()
			if !errors.Is(err, io.EOF) || received != b.N {
				b.Fatalf("Run: %v after %d of %d messages", err, received, b.N)
			}
		})
	}
}
