package nodestatus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/kdm-project/kdm/agent/internal/kubeapi"
)

// Node status timing, as the kubelet's defaults.
const (
	// DefaultUpdateFrequency is how often the Node's status is checked and the Lease renewed.
	DefaultUpdateFrequency = 10 * time.Second
	// DefaultLeaseDuration is the Lease's leaseDurationSeconds.
	DefaultLeaseDuration = 40 * time.Second
	// nodeStatusReportFrequency re-posts an unchanged status so the Ready heartbeat stays fresh.
	nodeStatusReportFrequency = 5 * time.Minute
	// LeaseNamespace holds one Lease per node.
	LeaseNamespace = "kube-node-lease"
	// notReadyTaintHintAfter is how long the Node may keep the not-ready taint, while kdm
	// reports it Ready, before kdm explains who removes it.
	notReadyTaintHintAfter = time.Minute
)

// DeviceCapacity is what a Publisher needs of a device manager; *devicemanager.Manager
// implements it.
type DeviceCapacity interface {
	GetCapacity() (capacity, allocatable v1.ResourceList, removed []string)
	ShouldResetExtendedResourceCapacity() bool
	DeviceChanges() <-chan struct{}
}

// Config describes a Publisher. Client, NodeName and Devices are required; every other zero
// value is usable as documented.
type Config struct {
	Client   kubernetes.Interface
	NodeName string
	Devices  DeviceCapacity
	// Capacity is published in capacity beside the device resources, for the resources the
	// embedder owns (cpu, memory, ephemeral-storage, pods). Zero: only device resources;
	// others' capacity keys are kept.
	Capacity v1.ResourceList
	// Reserved is subtracted from Capacity to give allocatable (never below zero), as the
	// kubelet subtracts --system-reserved and --kube-reserved. Zero: allocatable = capacity.
	Reserved v1.ResourceList
	// Labels are set on a Node the publisher creates and restored on an existing one at
	// start: the labels the node owns, such as kubernetes.io/hostname. Zero: none.
	Labels map[string]string
	// RegisterLabels and RegisterTaints are set only on a Node the publisher creates (the
	// kubelet's --node-labels and --register-with-taints). Zero: none.
	RegisterLabels map[string]string
	RegisterTaints []v1.Taint
	// Addresses replace status.addresses when set. Zero: left as they are.
	Addresses []v1.NodeAddress
	// NodeInfo replaces status.nodeInfo when any field is set. Zero: left as it is.
	NodeInfo v1.NodeSystemInfo
	// DropRemovedResources deletes a removed resource from the Node instead of publishing it
	// as 0 (the kubelet's way).
	DropRemovedResources bool
	// UpdateFrequency: zero means DefaultUpdateFrequency. LeaseDuration: zero means
	// DefaultLeaseDuration.
	UpdateFrequency time.Duration
	LeaseDuration   time.Duration
	// Clock: zero means the real clock. Logger: zero means klog's background logger.
	Clock  clock.Clock
	Logger klog.Logger
}

// Validate reports every missing or bad value, in the order of the fields.
func (c Config) Validate() error {
	var errs []error
	if c.Client == nil {
		errs = append(errs, errors.New("node publisher: a Kubernetes client is required"))
	}
	if c.NodeName == "" {
		errs = append(errs, errors.New("node publisher: a node name is required"))
	}
	if c.Devices == nil {
		errs = append(errs, errors.New("node publisher: a device capacity source is required"))
	}
	errs = append(errs, kubeapi.ValidateResources("node publisher capacity", c.Capacity, nil)...)
	errs = append(errs, kubeapi.ValidateResources("node publisher reserved", c.Reserved, nil)...)
	errs = append(errs, kubeapi.ValidateLabels("node publisher labels", c.Labels)...)
	errs = append(errs, kubeapi.ValidateLabels("node publisher register labels", c.RegisterLabels)...)
	errs = append(errs, kubeapi.ValidateTaints("node publisher register taints", c.RegisterTaints)...)
	if c.UpdateFrequency < 0 {
		errs = append(errs, fmt.Errorf("node publisher: update frequency must not be negative: %v", c.UpdateFrequency))
	}
	if c.LeaseDuration < 0 {
		errs = append(errs, fmt.Errorf("node publisher: lease duration must not be negative: %v", c.LeaseDuration))
	}
	if c.LeaseDuration > 0 && c.LeaseDuration < time.Second {
		errs = append(errs, fmt.Errorf("node publisher: lease duration must be at least 1s: %v", c.LeaseDuration))
	}
	return errors.Join(errs...)
}

// Publisher keeps a Node object's identity, capacity, device-plugin resources and Ready
// condition, and its Lease, in step with the host and a device manager. It owns only what
// its config names, the extended resources the manager reports (and those a recreated node
// zeroes) and the Ready condition; other capacity keys, labels, taints and conditions set by
// others are kept. Status is written by strategic merge patch, as the kubelet writes it.
//
// Run may be called once. The read methods (Healthy) are safe for concurrent use.
type Publisher struct {
	cfg   Config
	clock clock.Clock
	log   klog.Logger

	// Owned by Run's goroutine.
	lastReport    time.Time
	published     sets.Set[string] // resources of the last successful status write
	leaseRenewed  time.Time
	notReadySince time.Time // when the not-ready taint was first seen with Ready true; zero when absent
	hinted        bool      // the not-ready taint hint was logged for notReadySince
	// node and lease are the objects as the last successful call read or wrote them; nil
	// after a failed call, so that the next sync reads them afresh. Like the kubelet, which
	// reads its Node from a watch and renews its Lease from the one it last wrote, a steady
	// node costs the apiserver one Lease update per UpdateFrequency.
	node  *v1.Node
	lease *coordinationv1.Lease

	mu      sync.Mutex
	lastErr error // of the last API call of a sync; nil once one succeeds
}

// NewPublisher validates cfg and returns a publisher with its defaults applied.
func NewPublisher(cfg Config) (*Publisher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.UpdateFrequency == 0 {
		cfg.UpdateFrequency = DefaultUpdateFrequency
	}
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration = DefaultLeaseDuration
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Logger.GetSink() == nil {
		cfg.Logger = klog.Background()
	}
	return &Publisher{
		cfg:   cfg,
		clock: cfg.Clock,
		log:   cfg.Logger.WithValues("node", klog.KRef("", cfg.NodeName)),
	}, nil
}

// apiBackoff paces retries after API errors: 200ms doubling up to cap, with 10% jitter.
func apiBackoff(limit time.Duration) wait.Backoff {
	return wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 1 << 30, Cap: limit}
}

// periodJitter is the most, as a fraction of UpdateFrequency, added to each steady wait.
const periodJitter = 0.04

// maxRegisterBackoff caps the wait between registration attempts, as the kubelet's 7 s.
const maxRegisterBackoff = 7 * time.Second

// Run registers the node (creating it if absent, zeroing stale extended resources if the
// device manager says the node was recreated), then publishes the status on every device
// change and every UpdateFrequency, and renews the Lease, until ctx ends. A steady node reads
// neither its Node nor its Lease: it renews the Lease it last wrote and compares the status
// with the Node it last read or wrote; after any failed call, and while the Node keeps the
// not-ready taint, it reads the Node again. API errors are
// logged and retried with exponential backoff: 200ms doubling up to maxRegisterBackoff while
// registering and up to UpdateFrequency after, each with up to 10% jitter. Steady syncs are
// UpdateFrequency apart plus up to 4% jitter. Run returns nil
// when ctx ends.
func (p *Publisher) Run(ctx context.Context) error {
	bo := apiBackoff(maxRegisterBackoff)
	for {
		err := p.register(ctx)
		p.setErr(err)
		if err == nil {
			break
		}
		delay := bo.Step()
		p.log.Error(err, "Unable to register node with API server, will retry", "delay", delay)
		if !p.sleep(ctx, delay, nil) {
			return nil
		}
	}
	bo = apiBackoff(p.cfg.UpdateFrequency)
	for {
		changed := p.cfg.Devices.DeviceChanges()
		err := p.syncStatus(ctx)
		if err != nil && ctx.Err() == nil {
			p.log.Error(err, "Error updating node status, will retry")
		}
		// Renewal is due by time, not by tick, so a stream of device changes cannot starve it.
		if p.clock.Since(p.leaseRenewed) >= p.cfg.UpdateFrequency*9/10 {
			if lerr := p.renewLease(ctx); lerr != nil && ctx.Err() == nil {
				p.log.Error(lerr, "Failed to update lease")
				err = errors.Join(err, lerr)
			} else if lerr == nil {
				p.leaseRenewed = p.clock.Now()
			}
		}
		p.setErr(err)
		// Up to 4% more, as the kubelet's status loop and Lease controller wait: nodes that
		// started (or reconnected) together drift apart instead of calling in the same second.
		delay := wait.Jitter(p.cfg.UpdateFrequency, periodJitter)
		if err != nil {
			// Whatever failed, read the Node afresh next time: someone may have changed it
			// (the node lifecycle controller marks a silent node not ready).
			p.node = nil
			// The API server failed: retry sooner at first, and do not let device changes
			// turn the retries into a tight loop.
			delay, changed = bo.Step(), nil
		} else {
			bo = apiBackoff(p.cfg.UpdateFrequency)
		}
		if !p.sleep(ctx, delay, changed) {
			return nil
		}
	}
}

// sleep waits for d on the publisher's clock, for changed (when not nil), or for ctx; it
// returns false when ctx ended.
func (p *Publisher) sleep(ctx context.Context, d time.Duration, changed <-chan struct{}) bool {
	t := p.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-changed:
	case <-t.C():
	}
	return true
}

func (p *Publisher) setErr(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lastErr = err
}

// Healthy returns nil while the last sync with the API server succeeded (or none failed
// yet), and that sync's error otherwise: the API server is unreachable or refuses the node.
func (p *Publisher) Healthy() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lastErr != nil {
		return fmt.Errorf("last node status sync failed: %w", p.lastErr)
	}
	return nil
}
