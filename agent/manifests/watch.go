package manifests

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/fsnotify/fsnotify"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Pods is what the source needs of whoever admits its pods (the agent). Watch calls it from
// its own goroutine only; the source keeps no lock while calling it.
type Pods interface {
	// Tracked lists the UIDs of the pods this source added that are still tracked.
	Tracked() []types.UID
	// Track adds a manifest's pod and starts its admission, or rejects it if p.Invalid is set.
	// It returns a channel closed once that admission is over or waits for a device plugin,
	// and false when no admission started (the pod is tracked already, say).
	Track(ctx context.Context, p Pod) (settled <-chan struct{}, started bool)
	// Untrack removes a pod whose file is gone or now holds another pod, and releases its
	// devices.
	Untrack(uid types.UID)
	// AdmittedBefore reports whether the pod was admitted by an earlier run: such pods go
	// first, and the source reports ready once they are admitted again.
	AdmittedBefore(uid types.UID) bool
	// RestoredUnseen reports whether a pod with this UID was admitted, or was waiting for a
	// device plugin, before a restart and has not been tracked since.
	RestoredUnseen(uid types.UID) bool
	// RestoredByName lists, by "namespace/name", the UIDs of the pods admitted (or waiting)
	// before a restart. Watch asks once, at start.
	RestoredByName() map[string][]types.UID
}

// Config is what Watch reads the directory with.
type Config struct {
	// Path is the manifest directory. It is never created: a missing directory counts as
	// empty and is watched until it appears.
	Path string
	// ResyncPeriod is how often the directory is read again without an event.
	ResyncPeriod time.Duration
	// Clock drives every timer and the settle checks; nil means the real clock.
	Clock clock.Clock
	// Logger receives the directory's problems and changes; the zero value means
	// klog.Background().
	Logger klog.Logger
}

// Watch keeps pods in step with the manifest directory: at start, on every file event and
// every ResyncPeriod, until ctx ends (then it returns nil). After the first pass every pod of
// the directory has been handed to pods.Track, and Watch calls sourceReady. A directory that
// does not exist is never created: it is logged and watched until it appears (see manifestDir).
// New content that may still be in the writing, or that would replace a running pod before it
// has settled, is read again when it may be judged instead of being admitted or reported (see
// manifestSource.hold). It returns an error only when cfg has no Path or no positive
// ResyncPeriod, or when the directory watch cannot be set up.
func Watch(ctx context.Context, cfg Config, pods Pods, sourceReady func()) error {
	if cfg.Path == "" || cfg.ResyncPeriod <= 0 {
		return fmt.Errorf("manifest source needs a path and a positive resync period, got %q and %v", cfg.Path, cfg.ResyncPeriod)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Logger.GetSink() == nil {
		cfg.Logger = klog.Background()
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer func() { _ = w.Close() }()
	dir := &manifestDir{path: cfg.Path, w: w, log: cfg.Logger}
	// The sources count as ready once the first listing's pods that ran before a restart are
	// admitted again (they keep their devices through the manager's bypass only until then), or
	// wait for their plugin. New pods and waiting pods hold up nothing. A missing directory
	// counts as an empty one.
	src := newManifestSource(dir.path)
	src.now = cfg.Clock.Now
	src.known = pods.RestoredUnseen
	src.restored = pods.RestoredByName()
	retry := cfg.Clock.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	sync := func() []<-chan struct{} {
		if !dir.check() {
			return nil
		}
		settled := syncPods(ctx, cfg.Logger, src, pods)
		if d := src.retryIn(); d > 0 {
			retry.Reset(d)
		}
		return settled
	}
	// The first listing waits out files held back as still being written (for at most
	// manifestWriterWait): a pod that ran before a restart and whose file is being rewritten
	// must not count as gone when the sources become ready.
	firstUntil := cfg.Clock.Now().Add(manifestWriterWait)
	for {
		for _, settled := range sync() {
			select {
			case <-settled:
			case <-ctx.Done():
				return nil
			}
		}
		if src.retryIn() == 0 || !cfg.Clock.Now().Before(firstUntil) {
			break
		}
		select {
		case <-retry.C():
		case <-w.Events:
			if !dir.waitBurst(ctx, cfg.Clock) {
				return nil
			}
		case <-ctx.Done():
			return nil
		}
	}
	sourceReady()
	resync := cfg.Clock.NewTimer(cfg.ResyncPeriod)
	defer resync.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-w.Events:
			if !dir.waitBurst(ctx, cfg.Clock) {
				return nil
			}
			_ = sync()
		case err := <-w.Errors:
			cfg.Logger.Error(err, "Pod manifest watch error", "path", dir.path)
		case <-retry.C():
			_ = sync()
		case <-resync.C():
			resync.Reset(cfg.ResyncPeriod)
			_ = sync()
		}
	}
}

// syncPods tracks pods that appeared and untracks pods whose file is gone or now holds
// another pod. A file that cannot be read changes nothing: the pod of its last good version
// stays. Problems are logged once per version of a file. Pods admitted by an earlier run go
// first. It returns, for each of those, a channel closed once its admission is over or waits
// for a device plugin.
func syncPods(ctx context.Context, log klog.Logger, src *manifestSource, pods Pods) []<-chan struct{} {
	current, problems, err := src.scan()
	for _, p := range problems {
		log.Error(p, "Skipped pod manifest; the pod of its last readable version, if any, stays")
	}
	if err != nil {
		log.Error(err, "Failed to list pod manifests; nothing changes", "path", src.dir)
		return nil
	}
	// Removed pods release their devices before new pods are admitted.
	for _, uid := range pods.Tracked() {
		if _, ok := current[uid]; !ok {
			pods.Untrack(uid)
		}
	}
	var restarted []<-chan struct{}
	ordered := sortedPods(current)
	sort.SliceStable(ordered, func(i, j int) bool {
		return pods.AdmittedBefore(ordered[i].Pod.UID) && !pods.AdmittedBefore(ordered[j].Pod.UID)
	})
	for _, mp := range ordered {
		before := pods.AdmittedBefore(mp.Pod.UID)
		if settled, ok := pods.Track(ctx, mp); ok && before {
			restarted = append(restarted, settled)
		}
	}
	return restarted
}
