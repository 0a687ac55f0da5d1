// Package nvml is kdm's reference GPU device plugin, built on the deviceplugin SDK and
// github.com/NVIDIA/go-nvml. It advertises every GPU by UUID (with its NUMA node, read from
// sysfs through the GPU's PCI bus id), answers Allocate with NVIDIA_VISIBLE_DEVICES and the
// /dev/nvidia* device nodes (or CDI names nvidia.com/gpu=<uuid>), prefers GPUs on one NUMA node
// and then the lowest indexes, and takes a GPU out of service on a critical XID error (the
// workload-caused XIDs 13, 31, 43, 45, 68 and 109 are ignored, as NVIDIA's plugin does).
//
// It uses the real libnvidia-ml when present and go-nvml's mock of a DGX A100 (eight A100s)
// with Mock "dgxa100", which is how kdm's tests and demo run on machines without GPUs. The
// mock has no event support; a health control directory (files named after GPU UUIDs holding
// "Unhealthy" or "Healthy") lets tests and operators flip a GPU's health on any machine.
package nvml
