package endpoint

import (
	"context"
	"errors"
	"fmt"
	"io"

	"google.golang.org/grpc"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// Run opens the plugin's ListAndWatch stream and calls onDevices synchronously, in order, with
// the device list of each message (nil or empty for an empty list). The callback owns the
// slice; a slow callback slows the stream, it never drops or merges messages. While the
// callback runs, the next message is received and decoded (one message ahead, never more), so
// a callback that writes to disk does not also wait for the next list's decoding.
//
// Run always returns a non-nil error saying why the stream ended:
//   - ErrStopped (errors.Is) when Stop was called, or when the endpoint was already stopped
//     (then at once, without opening a stream);
//   - ctx.Err() (errors.Is) when ctx was cancelled or expired;
//   - otherwise the stream's error, wrapped: io.EOF when the plugin ended the stream cleanly,
//     a gRPC status error when the plugin went away.
//
// Run does not mark the endpoint stopped: the owner decides whether this instance's stream
// ending matters, so a replaced instance cannot affect its successor. Concurrent Runs open
// independent streams.
func (e *Endpoint) Run(ctx context.Context, onDevices func([]*pluginapi.Device)) error {
	if e.IsStopped() || e.client == nil {
		return e.errStopped()
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := e.client.ListAndWatch(sctx, &pluginapi.Empty{}, grpc.ForceCodecV2(newListAndWatchCodec()))
	if err != nil {
		return e.streamEnded(ctx, err)
	}
	msgs, ended := receiveAhead(sctx, stream)
	for resp := range msgs { // ends when the receiver does: no goroutine outlives Run
		e.log.V(2).Info("State pushed for device plugin", "resourceCapacity", len(resp.GetDevices()))
		onDevices(resp.GetDevices())
	}
	return e.streamEnded(ctx, *ended)
}

// receiveAhead receives the stream's messages on a goroutine and hands them over, in order, on
// the returned channel, which it closes once Recv fails or ctx ends; *ended then holds Recv's
// error (or ctx's). The channel is unbuffered, so the goroutine holds at most one message that
// the reader has not taken.
func receiveAhead(ctx context.Context, stream grpc.ServerStreamingClient[pluginapi.ListAndWatchResponse]) (<-chan *pluginapi.ListAndWatchResponse, *error) {
	msgs := make(chan *pluginapi.ListAndWatchResponse)
	ended := new(error)
	go func() {
		defer close(msgs)
		for {
			resp, err := stream.Recv()
			if err != nil {
				*ended = err
				return
			}
			select {
			case msgs <- resp:
			case <-ctx.Done():
				*ended = ctx.Err()
				return
			}
		}
	}()
	return msgs, ended
}

// streamEnded classifies why a ListAndWatch stream ended; see Run.
func (e *Endpoint) streamEnded(ctx context.Context, err error) error {
	switch {
	case e.IsStopped():
		return fmt.Errorf("%w: ListAndWatch ended: %w", e.errStopped(), err)
	case ctx.Err() != nil:
		return fmt.Errorf("ListAndWatch of %s cancelled: %w", e.resourceName, ctx.Err())
	case errors.Is(err, io.EOF):
		return fmt.Errorf("ListAndWatch of %s ended by the device plugin: %w", e.resourceName, err)
	default:
		return fmt.Errorf("ListAndWatch of %s failed: %w", e.resourceName, err)
	}
}
