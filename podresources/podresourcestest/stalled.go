// Package podresourcestest holds helpers for tests that drive a podresources server from the
// outside.
package podresourcestest

import (
	"bytes"
	"fmt"
	"io"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// StartStalledLists speaks HTTP/2 over conn as a client that never accepts a response: it
// announces a zero stream receive window and starts one v1 List call, with an empty request,
// on each of streams streams (stream IDs 1, 3, 5, ...). The server can answer each call's
// headers but never deliver its message, as long as the caller sends no WINDOW_UPDATE.
//
// It returns the framer, for a caller that wants to read what the server sends. It neither
// reads from nor closes conn; errors name the frame that could not be written.
func StartStalledLists(conn io.ReadWriter, streams int) (*http2.Framer, error) {
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		return nil, fmt.Errorf("writing the HTTP/2 preface: %w", err)
	}
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0}); err != nil {
		return nil, fmt.Errorf("writing SETTINGS: %w", err)
	}
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for i := range streams {
		block.Reset()
		for _, f := range []hpack.HeaderField{
			{Name: ":method", Value: "POST"},
			{Name: ":scheme", Value: "http"},
			{Name: ":path", Value: "/v1.PodResourcesLister/List"},
			{Name: ":authority", Value: "localhost"},
			{Name: "content-type", Value: "application/grpc"},
			{Name: "te", Value: "trailers"},
		} {
			if err := enc.WriteField(f); err != nil {
				return nil, fmt.Errorf("encoding headers: %w", err)
			}
		}
		id := uint32(2*i + 1)
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block.Bytes(), EndHeaders: true}); err != nil {
			return nil, fmt.Errorf("writing HEADERS of stream %d: %w", id, err)
		}
		// An empty ListPodResourcesRequest: uncompressed, zero length.
		if err := fr.WriteData(id, true, []byte{0, 0, 0, 0, 0}); err != nil {
			return nil, fmt.Errorf("writing DATA of stream %d: %w", id, err)
		}
	}
	return fr, nil
}
