package devicemanager

import (
	"context"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"k8s.io/klog/v2/ktesting"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/checkpoint"
)

// TestRestoredAnswersDecodeOrAreSkipped: a checkpoint entry whose stored Allocate answer does
// not decode is skipped at restore, as the kubelet skips it, even when the fault is one only a
// full decode finds (a string that is not UTF-8 in otherwise well-formed wire data); an entry
// whose answer decodes gives the container its run options from that answer.
func TestRestoredAnswersDecodeOrAreSkipped(t *testing.T) {
	good, err := proto.Marshal(&pluginapi.ContainerAllocateResponse{
		Envs:       map[string]string{"VISIBLE": "g1"},
		CdiDevices: []*pluginapi.CDIDevice{{Name: "example.com/gpu=g1"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	entry := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), []byte{0xff}) // key: not UTF-8
	badUTF8 := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), entry)      // envs
	if proto.Unmarshal(badUTF8, &pluginapi.ContainerAllocateResponse{}) == nil {
		t.Fatal("the bad answer decodes; the test needs one that does not")
	}
	dir := shortDir(t)
	store, err := checkpoint.NewStore(checkpoint.StoreConfig{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Write(&checkpoint.Data{
		PodDeviceEntries: []checkpoint.PodDevicesEntry{
			{PodUID: "good", ContainerName: "c", ResourceName: gpu, DeviceIDs: checkpoint.DevicesPerNUMA{-1: {"g1"}}, AllocResp: good},
			{PodUID: "bad", ContainerName: "c", ResourceName: gpu, DeviceIDs: checkpoint.DevicesPerNUMA{-1: {"g2"}}, AllocResp: badUTF8},
		},
		RegisteredDevices: map[string][]string{gpu: {"g1", "g2"}},
	}); err != nil {
		t.Fatal(err)
	}
	logger, logs := bufferedLogger(t)
	m := testManager(t, dir, Config{Logger: logger}, Sources{})
	if got := m.GetDevices("bad", "c"); len(got) != 0 {
		t.Fatalf("the entry whose answer does not decode was restored: %v", got)
	}
	if !strings.Contains(logs(), "Skipped checkpoint entry whose allocation response does not decode") {
		t.Fatalf("no log for the skipped entry:\n%s", logs())
	}
	pod := testPod("good", container("c", map[string]int64{gpu: 1}))
	opts, err := m.GetDeviceRunContainerOptions(context.Background(), pod, &pod.Spec.Containers[0])
	if err != nil {
		t.Fatal(err)
	}
	if opts == nil || len(opts.Envs) != 1 || opts.Envs[0].Value != "g1" || len(opts.CDIDevices) != 1 || opts.CDIDevices[0].Name != "example.com/gpu=g1" {
		t.Fatalf("run options from the restored answer: %+v", opts)
	}
}

// bufferedLogger is a test logger whose output can be read back.
func bufferedLogger(t *testing.T) (logr.Logger, func() string) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(2), ktesting.BufferLogs(true)))
	return logger, func() string { return logger.GetSink().(ktesting.Underlier).GetBuffer().String() }
}
