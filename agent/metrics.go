package agent

import "github.com/prometheus/client_golang/prometheus"

// Admission results, the values of kdm_admissions_total's result label.
const (
	admissionAdmitted = "admitted"
	admissionRejected = "rejected" // the device manager refused it (UnexpectedAdmissionError)
	admissionInvalid  = "invalid"  // the manifest failed validation (InvalidPod)
)

// newAdmissionCounter is kdm_admissions_total{result}: each pod admission's final outcome,
// counted once per admission (a pod's later health refreshes and a deferred admission's
// waiting are not outcomes). The kubelet's nearest metric is
// kubelet_admission_rejections_total{reason}, which counts rejections only.
func newAdmissionCounter() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kdm_admissions_total",
		Help: "Pod admissions by outcome: admitted, rejected (by the device manager) or invalid (the manifest failed validation).",
	}, []string{"result"})
}
