package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"k8s.io/klog/v2/ktesting"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kdm-project/kdm/agent/podresult"
	"github.com/kdm-project/kdm/agent/statusapi"
	"github.com/kdm-project/kdm/devicemanager"
	"github.com/kdm-project/kdm/deviceplugin"
)

// pageView is what the status page's DOM shows, read by pageViewJS.
type pageView struct {
	Live      string       `json:"live"`
	Policy    string       `json:"policy"`  // the header's policy line
	Runtime   string       `json:"runtime"` // the line above the pods that says what runs
	State     string       `json:"state"`   // the GPU resource card's endpoint state
	Capacity  string       `json:"capacity"`
	Alloc     string       `json:"alloc"`
	Free      string       `json:"free"`
	Countdown string       `json:"countdown"`
	Devices   []pageDevice `json:"devices"`
	IDPrefix  string       `json:"idPrefix"` // the common start of the card's device IDs, shown once
	Compact   int          `json:"compact"`  // devices drawn as small squares
	Pods      []pagePod    `json:"pods"`
	Events    []string     `json:"events"`   // kinds, newest first
	Timeline  []pageEvent  `json:"timeline"` // the events as shown, newest first
}

type pageEvent struct {
	Kind    string `json:"kind"`
	Subject string `json:"subject"`
	Text    string `json:"text"`
}

type pageDevice struct {
	ID     string `json:"id"`
	Health string `json:"health"`
	Holder string `json:"holder"`
	Label  string `json:"label"` // the ID as the tile shows it
}

type pagePod struct {
	Pod          string `json:"pod"`
	Phase        string `json:"phase"`
	RuntimePhase string `json:"runtimePhase"`
	Text         string `json:"text"`
}

// pageViewJS reads the page's DOM (never its JavaScript state), what a person sees, with the
// card of resource %s.
const pageViewJS = `((resource) => {
  const q = (root, sel) => { const e = root && root.querySelector(sel); return e ? e.textContent.trim() : ""; };
  const live = document.getElementById("live");
  const r = [...document.querySelectorAll("[data-resource]")].find((e) => e.dataset.resource === resource);
  return {
    live: live ? live.dataset.state : "",
    policy: q(document, "#policy"), runtime: q(document, "#runtime"),
    state: r ? r.dataset.state : "",
    capacity: q(r, ".cap"), alloc: q(r, ".alloc"), free: q(r, ".free-count"), countdown: q(r, ".countdown"),
    devices: r ? [...r.querySelectorAll(".dev")].map((d) => ({id: d.dataset.id, health: d.dataset.health, holder: d.dataset.holder, label: q(d, ".dev-id")})) : [],
    idPrefix: q(r, ".id-prefix code"),
    pods: [...document.querySelectorAll(".pod")].map((p) => ({pod: p.dataset.pod, phase: p.dataset.phase, runtimePhase: p.dataset.runtimePhase || "", text: p.textContent})),
    compact: r ? r.querySelectorAll(".grid.compact .dev").length : 0,
    events: [...document.querySelectorAll("#events li")].map((li) => li.dataset.kind || ""),
    timeline: [...document.querySelectorAll("#events li")].map((li) => ({kind: li.dataset.kind || "", subject: q(li, ".subject"), text: q(li, ".ev-text")})),
  };
})(%s)`

// findChromium returns the Chromium binary: $KDM_CHROMIUM, else chromium on PATH. Its absence
// fails the test rather than skipping it: CI installs Debian's chromium package (.ci/run).
func findChromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("KDM_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("TestStatusPage needs headless Chromium and found no chromium on PATH: " +
		"install it (apt-get install -y chromium; .ci/run does) or point KDM_CHROMIUM at a Chrome or Chromium binary")
	return ""
}

// browser is one headless Chromium tab; view reads the card of resource.
type browser struct {
	t        *testing.T
	ctx      context.Context
	resource string
}

// newBrowser starts headless Chromium (no sandbox: CI runs as root) with a viewport of
// width×height. Everything it does is bounded by limit; it is stopped at cleanup.
func newBrowser(t *testing.T, width, height int, limit time.Duration) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(findChromium(t)),
		chromedp.NoSandbox,
		chromedp.Headless,
		chromedp.WindowSize(width, height),
		chromedp.Flag("hide-scrollbars", true),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithErrorf(t.Logf))
	// The browser lives as long as ctx: a watchdog, not a context deadline, bounds the run.
	watchdog := time.AfterFunc(limit, func() {
		t.Errorf("browser test ran past %s; stopping the browser", limit)
		cancel()
	})
	t.Cleanup(func() {
		watchdog.Stop()
		cancel()
		cancelAlloc()
	})
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(int64(width), int64(height))); err != nil {
		t.Fatalf("starting Chromium: %v", err)
	}
	return &browser{t: t, ctx: ctx, resource: gpuResource}
}

func (b *browser) do(steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.t.Fatalf("browser: %v", err)
	}
}

// view reads the page's DOM.
func (b *browser) view() (pageView, error) {
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	return chromedp.Run(ctx, chromedp.Evaluate[pageView](fmt.Sprintf(pageViewJS, strconv.Quote(b.resource))))
}

// waitView polls the DOM every 50 ms until cond holds or within passes; it returns the view
// and how long it took.
func (b *browser) waitView(what string, within time.Duration, cond func(pageView) bool) (pageView, time.Duration) {
	b.t.Helper()
	start := time.Now()
	var last pageView
	var lastErr error
	for time.Since(start) < within {
		v, err := b.view()
		if err == nil {
			last = v
			if cond(v) {
				return v, time.Since(start)
			}
		}
		lastErr = err
		time.Sleep(50 * time.Millisecond)
	}
	js, _ := json.MarshalIndent(last, "", "  ")
	b.t.Fatalf("the page did not show %s within %s (last read error: %v); last DOM view: %s", what, within, lastErr, js)
	return last, 0
}

// screenshot saves a full-page PNG under dir and, with KDM_UPDATE_SCREENSHOTS=1, to docs/img/
// for the README (committed by hand when it changes).
func (b *browser) screenshot(dir, name string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o600); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot: %s", path)
	if os.Getenv("KDM_UPDATE_SCREENSHOTS") == "1" {
		dst := filepath.Join("..", "docs", "img", name)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			b.t.Fatal(err)
		}
		if err := os.WriteFile(dst, png, 0o644); err != nil {
			b.t.Fatal(err)
		}
		b.t.Logf("screenshot updated: %s", dst)
	}
}

// copySamplePod places one of testdata/pods in the manifest directory (atomically).
func (n *node) copySamplePod(name string) {
	n.t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "testdata", "pods", name+".yaml"))
	if err != nil {
		n.t.Fatal(err)
	}
	tmp := filepath.Join(n.manifests, "."+name+".tmp")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		n.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(n.manifests, name+".yaml")); err != nil {
		n.t.Fatal(err)
	}
}

// holders maps each pod (namespace/name) to the GPUs the page's device grid shows it holding.
func (v pageView) holders() map[string][]string {
	out := map[string][]string{}
	for _, d := range v.Devices {
		for _, h := range strings.Split(d.Holder, "; ") {
			if pod, _, ok := strings.Cut(h, " · "); ok {
				out[pod] = append(out[pod], d.ID)
			}
		}
	}
	for pod := range out {
		slices.Sort(out[pod])
	}
	return out
}

func (v pageView) pod(name string) pagePod {
	for _, p := range v.Pods {
		if p.Pod == name {
			return p
		}
	}
	return pagePod{}
}

// event returns the newest event of kind about subject as shown.
func (v pageView) event(kind, subject string) (pageEvent, bool) {
	for _, e := range v.Timeline {
		if e.Kind == kind && e.Subject == subject {
			return e, true
		}
	}
	return pageEvent{}, false
}

func (v pageView) count(kind string) int {
	n := 0
	for _, k := range v.Events {
		if k == kind {
			n++
		}
	}
	return n
}

var countdownRE = regexp.MustCompile(`^(\d+):(\d\d)$`)

// countdownSeconds parses the page's m:ss countdown.
func countdownSeconds(s string) (int, bool) {
	m := countdownRE.FindStringSubmatch(s)
	if m == nil {
		return 0, false
	}
	minutes, _ := strconv.Atoi(m[1])
	seconds, _ := strconv.Atoi(m[2])
	return minutes*60 + seconds, true
}

// TestStatusPage loads the live status page in headless Chromium while kdm runs with the mock
// DGX A100 plugin, two sample pods and a pod whose init and app containers share 2 GPUs (and
// one pod too big for the node): the DOM shows the 8 GPUs, how many are free, the policy, and
// the pods' assignments as podresources reports them, the shared pod's event counting 2 GPUs,
// and no device ID broken inside a part (only after a '-'); when the plugin is SIGKILLed the
// page shows, within 2 s and without a reload, the endpoint stopped with a ticking grace
// countdown and allocatable 0; when the plugin comes back it shows the recovery. A page that
// stops updating fails every step after the first.
func TestStatusPage(t *testing.T) {
	if testing.Short() {
		t.Skip("drives headless Chromium; run by make test")
	}
	b := newBrowser(t, 1280, 900, 90*time.Second)
	n := newNode(t)
	n.startKdm()
	// Once kdm serves, its start-up cleanup is over: a plugin started earlier registers twice.
	n.eventually("kdm serving", func(statusapi.NodeStatus) bool { return true })
	n.startPlugin()
	n.eventually("8 GPUs", gpus(8))
	n.copySamplePod("training") // ml/training: 4 GPUs
	n.copySamplePod("notebook") // research/notebook: 1 GPU
	n.placeManifest("shared.yaml", sharedGPUsPod)
	n.writePod("oversized", 9) // more GPUs than the node has: rejected
	n.eventually("sample pods admitted, the oversized one rejected", func(st statusapi.NodeStatus) bool {
		tr, nb, sh, big := pod(st, "training"), pod(st, "notebook"), pod(st, "shared"), pod(st, "oversized")
		return tr != nil && tr.Phase == podresult.PhaseAdmitted && nb != nil && nb.Phase == podresult.PhaseAdmitted &&
			sh != nil && sh.Phase == podresult.PhaseAdmitted && big != nil && big.Phase == podresult.PhaseRejected
	})
	pr := n.podResources()
	want := map[string][]string{"ml/training": sorted(pr["training"]), "research/notebook": sorted(pr["notebook"])}
	if len(want["ml/training"]) != 4 || len(want["research/notebook"]) != 1 {
		t.Fatalf("podresources = %v, want 4 GPUs for training and 1 for notebook", pr)
	}
	shared := slices.Compact(sorted(pr["shared"]))
	if len(shared) != 2 {
		t.Fatalf("podresources gives the shared pod %v, want 2 GPUs", pr["shared"])
	}
	allIDs := slices.Concat(want["ml/training"], want["research/notebook"], shared)

	b.do(chromedp.Navigate("http://" + n.healthAddr + "/"))
	v, _ := b.waitView("8 GPUs and the pods' assignments", 10*time.Second, func(v pageView) bool {
		h := v.holders()
		return v.Live == "live" && v.State == "Running" && v.Capacity == "8" && v.Alloc == "8" && len(v.Devices) == 8 &&
			slices.Equal(h["ml/training"], want["ml/training"]) && slices.Equal(h["research/notebook"], want["research/notebook"])
	})
	// 8 GPUs: 4 for training, 1 for the notebook, and the 2 that the shared pod's init and app
	// containers hold together.
	if v.Free != "1" {
		t.Errorf("the GPU card shows %q free, want 1", v.Free)
	}
	if wantPolicy := "policy " + devicemanager.DefaultPolicyName(); v.Policy != wantPolicy {
		t.Errorf("the header shows %q, want %q", v.Policy, wantPolicy)
	}
	if v.Runtime != podresult.NoContainersMessage {
		t.Errorf("the pods section says %q about containers; want %q", v.Runtime, podresult.NoContainersMessage)
	}
	if e, ok := v.event(statusapi.EventAdmitted, "e2e/shared"); !ok || e.Text != "admitted with 2 × nvidia.com/gpu" {
		t.Errorf("the shared pod's Admitted event reads %q (found: %v), want \"admitted with 2 × nvidia.com/gpu\"", e.Text, ok)
	}
	assertIDsUnbroken(t, b, "desktop", allIDs)
	// The mock GPUs' IDs differ only in their last digits: the card names their common start
	// once, and each tile shows a label of its own that ends its ID.
	labels := map[string]bool{}
	for _, d := range v.Devices {
		if v.IDPrefix == "" || !strings.HasPrefix(d.ID, v.IDPrefix) || !strings.HasPrefix(d.Label, "…") ||
			!strings.HasSuffix(d.ID, strings.TrimPrefix(d.Label, "…")) {
			t.Errorf("GPU %s: tile label %q with the card's prefix %q; want the prefix shown once and the rest on the tile", d.ID, d.Label, v.IDPrefix)
		}
		labels[d.Label] = true
	}
	if len(labels) != len(v.Devices) {
		t.Errorf("%d tile labels for %d GPUs: tiles do not tell the GPUs apart", len(labels), len(v.Devices))
	}
	for _, d := range v.Devices {
		if d.Health != "Healthy" {
			t.Errorf("GPU %s shown %s, want Healthy", d.ID, d.Health)
		}
	}
	for name, ids := range want {
		p := v.pod(name)
		if p.Phase != podresult.PhaseAdmitted {
			t.Errorf("pod %s shown %q, want Admitted", name, p.Phase)
		}
		for _, id := range ids {
			if !strings.Contains(p.Text, id) {
				t.Errorf("pod %s's entry does not name its GPU %s: %q", name, id, p.Text)
			}
		}
	}
	if p := v.pod("e2e/oversized"); p.Phase != podresult.PhaseRejected || !strings.Contains(p.Text, "UnexpectedAdmissionError") ||
		!strings.Contains(p.Text, "which is unexpected") {
		t.Errorf("oversized pod shown %q: %q, want Rejected with the kubelet's message", p.Phase, p.Text)
	}
	for _, kind := range []string{statusapi.EventStarted, statusapi.EventRegistered, statusapi.EventAdmitted, statusapi.EventRejected} {
		if v.count(kind) == 0 {
			t.Errorf("timeline lacks a %s event: %v", kind, v.Events)
		}
	}
	shots := filepath.Join(n.base, "screenshots")
	if err := os.MkdirAll(shots, 0o750); err != nil {
		t.Fatal(err)
	}
	b.screenshot(shots, "status-page.png")

	// The plugin dies: the page shows it at once, without a reload.
	registered := v.count(statusapi.EventRegistered)
	n.killPlugins()
	v, took := b.waitView("the endpoint stopped with a countdown and allocatable 0", 2*time.Second, func(v pageView) bool {
		s, ok := countdownSeconds(v.Countdown)
		return v.State == "Stopped" && v.Alloc == "0" && v.Capacity == "8" && ok && s > 0 && s <= 300
	})
	t.Logf("the page showed the stopped endpoint %s after the SIGKILL", took.Round(time.Millisecond))
	if v.count(statusapi.EventDisconnected) == 0 {
		t.Errorf("timeline lacks the disconnect: %v", v.Events)
	}
	if h := v.holders(); !slices.Equal(h["ml/training"], want["ml/training"]) {
		t.Errorf("training's GPUs shown %v while the plugin is away, want %v kept", h["ml/training"], want["ml/training"])
	}
	first, _ := countdownSeconds(v.Countdown)
	v, _ = b.waitView("the countdown ticking", 5*time.Second, func(v pageView) bool {
		s, ok := countdownSeconds(v.Countdown)
		return ok && s <= first-2 && v.Live == "live"
	})
	b.screenshot(shots, "status-page-plugin-stopped.png")

	// The plugin comes back: the page recovers, assignments unchanged.
	n.startPlugin()
	v, took = b.waitView("the plugin registered again", 20*time.Second, func(v pageView) bool {
		h := v.holders()
		return v.State == "Running" && v.Alloc == "8" && v.Countdown == "" && v.count(statusapi.EventRegistered) > registered &&
			slices.Equal(h["ml/training"], want["ml/training"]) && slices.Equal(h["research/notebook"], want["research/notebook"])
	})
	t.Logf("the page showed the recovery %s after the plugin restarted", took.Round(time.Millisecond))
	for _, d := range v.Devices {
		if d.Health != "Healthy" {
			t.Errorf("GPU %s shown %s after recovery, want Healthy", d.ID, d.Health)
		}
	}

	// The same page on a phone.
	b.do(chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile, chromedp.EmulateTouch))
	if _, err := b.view(); err != nil {
		t.Fatal(err)
	}
	b.screenshot(shots, "status-page-phone.png")
	assertNoOverflow(t, b)
	if v, _ := b.waitView("1 GPU free after the recovery", 5*time.Second, func(v pageView) bool { return v.Free == "1" }); v.Policy == "" {
		t.Errorf("the phone page does not show the policy")
	}
	assertIDsUnbroken(t, b, "phone", allIDs)
}

// sharedGPUsPod is a pod whose init container and app container ask for 2 GPUs each: the app
// container gets the init container's GPUs, so the pod holds 2.
const sharedGPUsPod = `apiVersion: v1
kind: Pod
metadata:
  name: shared
  namespace: e2e
  uid: 00000000-0000-4000-8000-0000000005a1
spec:
  initContainers:
  - name: setup
    image: example.com/setup
    resources:
      limits:
        nvidia.com/gpu: 2
  containers:
  - name: main
    image: example.com/app
    resources:
      limits:
        nvidia.com/gpu: 2
`

// idWrapJS finds each of the IDs %s in the pods' device lists and reports every part of one
// (what lies between its '-'s, the '-' included) whose characters the page draws on more than
// one line, and the most lines one container's device list takes. It reads the drawn text, so
// it holds whatever markup the page uses.
const idWrapJS = `((ids) => {
  const out = {parts: 0, lines: 0, broken: []};
  for (const el of document.querySelectorAll(".pod .ctr .devs")) {
    const nodes = [];
    let text = "";
    const walk = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    for (let n = walk.nextNode(); n; n = walk.nextNode()) { nodes.push([n, text.length]); text += n.data; }
    const startAt = (i) => { for (let k = nodes.length - 1; k >= 0; k--) if (nodes[k][1] <= i) return [nodes[k][0], i - nodes[k][1]]; };
    const endAt = (i) => { for (const [n, off] of nodes) if (i <= off + n.data.length) return [n, i - off]; };
    out.lines = Math.max(out.lines, new Set([...el.getClientRects()].map((r) => Math.round(r.top))).size);
    for (const id of ids) {
      for (let i = text.indexOf(id); i >= 0; i = text.indexOf(id, i + 1)) {
        let at = i;
        for (const part of id.split(/(?<=-)/)) {
          const r = document.createRange();
          r.setStart(...startAt(at));
          r.setEnd(...endAt(at + part.length));
          const tops = new Set([...r.getClientRects()].filter((x) => x.width > 0).map((x) => Math.round(x.top)));
          out.parts++;
          if (tops.size > 1) out.broken.push(part + " of " + id);
          at += part.length;
        }
      }
    }
  }
  return out;
})(%s)`

// assertIDsUnbroken fails when a pod card draws a part of a device ID on two lines; some
// device list must take several lines, or the check would prove nothing.
func assertIDsUnbroken(t *testing.T, b *browser, where string, ids []string) {
	t.Helper()
	quoted, err := json.Marshal(ids)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	got, err := chromedp.Run(ctx, chromedp.Evaluate[struct {
		Parts  int      `json:"parts"`
		Lines  int      `json:"lines"`
		Broken []string `json:"broken"`
	}](fmt.Sprintf(idWrapJS, quoted)))
	if err != nil {
		t.Fatal(err)
	}
	if got.Parts == 0 || got.Lines < 2 {
		t.Fatalf("on the %s no pod card lists the IDs %v over several lines (%d parts found, at most %d lines)", where, ids, got.Parts, got.Lines)
	}
	if len(got.Broken) > 0 {
		t.Errorf("on the %s pod cards break device IDs inside a part: %q", where, got.Broken)
	}
}

// assertNoOverflow fails when the page is wider than the viewport (readable on a phone means
// no sideways scrolling).
func assertNoOverflow(t *testing.T, b *browser) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	w, err := chromedp.Run(ctx, chromedp.Evaluate[[2]int](`[document.documentElement.scrollWidth, window.innerWidth]`))
	if err != nil {
		t.Fatal(err)
	}
	if w[0] > w[1] {
		t.Errorf("on a 390 px wide phone the page is %d px wide: it scrolls sideways", w[0])
	}
}

// TestStatusPageManyDevices checks the page stays usable with 1,000 devices on two NUMA nodes:
// every device is drawn, as a compact grid, the holders are right, and a phone does not scroll
// sideways.
func TestStatusPageManyDevices(t *testing.T) {
	if testing.Short() {
		t.Skip("drives headless Chromium; run by make test")
	}
	const resource, total, held = "example.com/vf", 1000, 300
	b := newBrowser(t, 1280, 900, 90*time.Second)
	b.resource = resource
	n := newNode(t)
	n.startKdm()
	n.eventually("kdm serving", func(statusapi.NodeStatus) bool { return true })
	var devs []*pluginapi.Device
	for i := range total {
		devs = append(devs, &pluginapi.Device{ID: fmt.Sprintf("vf-%04d", i), Health: pluginapi.Healthy,
			Topology: &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: int64(i % 2)}}}})
	}
	devs[7].Health = pluginapi.Unhealthy
	startSDKPlugin(t, n, resource, devs)
	// Until the first device list is in, the resource is unknown and a pod asking for it would
	// be admitted without devices (the kubelet's device manager does the same).
	n.eventually("the device list", func(st statusapi.NodeStatus) bool { return st.Allocatable[resource] == total-1 })
	manifest := fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata:\n  name: vf-user\n  namespace: net\n  uid: 00000000-0000-4000-8000-00000000f001\n"+
		"spec:\n  containers:\n  - name: dpdk\n    image: example.com/dpdk\n    resources:\n      limits:\n        %s: %d\n", resource, held)
	if err := os.WriteFile(filepath.Join(n.manifests, "vf-user.yaml"), []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	n.eventually("the pod admitted", func(st statusapi.NodeStatus) bool {
		p := pod(st, "vf-user")
		return p != nil && p.Phase == podresult.PhaseAdmitted
	})

	b.do(chromedp.Navigate("http://" + n.healthAddr + "/"))
	v, took := b.waitView("1,000 devices, 300 held", 10*time.Second, func(v pageView) bool {
		return v.State == "Running" && len(v.Devices) == total && len(v.holders()["net/vf-user"]) == held
	})
	t.Logf("1,000 devices shown %s after the page was opened", took.Round(time.Millisecond))
	if v.Compact != total {
		t.Errorf("%d of %d devices drawn as compact squares", v.Compact, total)
	}
	if v.Capacity != "1000" || v.Alloc != "999" {
		t.Errorf("capacity %s, allocatable %s; want 1000 and 999 (one device unhealthy)", v.Capacity, v.Alloc)
	}
	for _, d := range v.Devices {
		if d.ID == "vf-0007" && d.Health != "Unhealthy" {
			t.Errorf("vf-0007 shown %s, want Unhealthy", d.Health)
		}
	}
	b.screenshot(filepath.Join(n.base), "status-page-1000-devices.png")
	b.do(chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile, chromedp.EmulateTouch))
	assertNoOverflow(t, b)
}

// hostileView is what TestStatusPageHostileNames reads from the page: the text a person sees,
// where the hostile pod, device and event are drawn, and the layout's widths.
type hostileView struct {
	Body      string   `json:"body"`      // document.body.innerText
	Title     string   `json:"title"`     // document.title
	Pod       string   `json:"pod"`       // the text of the card whose data-pod is the bidi pod
	Device    string   `json:"device"`    // the text of the tile whose data-id is the bidi device
	Subjects  []string `json:"subjects"`  // the events' subjects, as shown
	LongPod   bool     `json:"longPod"`   // the 10 KB pod's card is drawn
	LongEvent bool     `json:"longEvent"` // an event names the 10 KB pod
	// Overflow lists the elements of the pods and events columns that reach past their
	// column or the viewport, with their right edges; Scroll is the page's scroll width
	// and Width the viewport's.
	Overflow []string `json:"overflow"`
	Scroll   int      `json:"scroll"`
	Width    int      `json:"width"`
}

const hostileViewJS = `((pod, device, long) => {
  const cards = [...document.querySelectorAll(".pod")];
  const card = cards.find((p) => p.dataset.pod === pod);
  const tile = [...document.querySelectorAll(".dev")].find((d) => d.dataset.id === device);
  const subjects = [...document.querySelectorAll("#events .subject")].map((s) => s.textContent);
  // The right edge of what can be seen of e: ancestors that clip their overflow cut it.
  const seenRight = (e, col) => {
    let right = e.getBoundingClientRect().right;
    for (let a = e.parentElement; a && a !== col; a = a.parentElement) {
      if (getComputedStyle(a).overflowX !== "visible") right = Math.min(right, a.getBoundingClientRect().right);
    }
    return right;
  };
  const overflow = [];
  for (const col of ["pods-section", "events-section"]) {
    const c = document.getElementById(col);
    const edge = Math.min(c.getBoundingClientRect().right, window.innerWidth) + 1;
    for (const e of [c, ...c.querySelectorAll("*")]) {
      const right = seenRight(e, c);
      if (e.getBoundingClientRect().width > 0 && right > edge) overflow.push(col + " " + e.tagName + "." + e.className + " right " + Math.round(right) + " > " + Math.round(edge));
    }
  }
  return {
    body: document.body.innerText, title: document.title,
    pod: card ? card.innerText : "", device: tile ? tile.innerText : "", subjects,
    longPod: cards.some((p) => p.dataset.pod.length > 10000),
    longEvent: subjects.some((s) => s.length > 10000),
    overflow: overflow.slice(0, 10), scroll: document.documentElement.scrollWidth, width: window.innerWidth,
  };
})(%s, %s, %s)`

// TestStatusPageHostileNames (issue 30 item 9): names and device IDs holding bidi controls
// (U+202E turns "evil\u202egpj.exe" into what reads "evilexe.jpg") are shown escaped, never
// raw, in the pod cards, the device grid and the events; and a pod with a 10 KB name neither
// widens the pods or events column nor the page, on a desktop or a phone.
func TestStatusPageHostileNames(t *testing.T) {
	if testing.Short() {
		t.Skip("drives headless Chromium; run by make test")
	}
	const (
		resource  = "example.com/bidi"
		bidiPod   = "evil\u202egpj.exe"
		bidiID    = "dev\u202e1"
		bidiShown = `evil\u202egpj.exe`
		idShown   = `dev\u202e1`
	)
	long := strings.Repeat("a", 10240)
	b := newBrowser(t, 1280, 900, 90*time.Second)
	b.resource = resource
	n := newNode(t)
	n.startKdm()
	n.eventually("kdm serving", func(statusapi.NodeStatus) bool { return true })
	startSDKPlugin(t, n, resource, []*pluginapi.Device{{ID: bidiID, Health: pluginapi.Healthy}, {ID: "plain", Health: pluginapi.Healthy}})
	n.eventually("the device list", func(st statusapi.NodeStatus) bool { return st.Allocatable[resource] == 2 })
	n.placeManifest("holder.yaml", podManifest("holder", uidOf("holder"), fmt.Sprintf("      limits:\n        %s: 2\n", resource)))
	n.placeManifest("bidi.yaml", podManifest(bidiPod, uidOf("bidi"), ""))
	n.placeManifest("long.yaml", podManifest(long, uidOf("long"), ""))
	n.eventually("the three pods' results", func(st statusapi.NodeStatus) bool {
		h := pod(st, "holder")
		return h != nil && h.Phase == podresult.PhaseAdmitted && pod(st, bidiPod) != nil && pod(st, long) != nil
	})

	b.do(chromedp.Navigate("http://" + n.healthAddr + "/"))
	read := func(what string, cond func(hostileView) bool) hostileView {
		t.Helper()
		js := fmt.Sprintf(hostileViewJS, strconv.Quote("e2e/"+bidiPod), strconv.Quote(bidiID), strconv.Quote(long))
		start := time.Now()
		var last hostileView
		for time.Since(start) < 10*time.Second {
			rctx, rcancel := context.WithTimeout(b.ctx, 5*time.Second)
			v, err := chromedp.Run(rctx, chromedp.Evaluate[hostileView](js))
			rcancel()
			if err == nil {
				last = v
				if cond(v) {
					return v
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
		last.Body = tail(last.Body, 2000)
		js2, _ := json.MarshalIndent(last, "", "  ")
		t.Fatalf("the page did not show %s within 10s; last view: %s", what, js2)
		return last
	}
	drawn := func(v hostileView) bool { return v.Pod != "" && v.Device != "" && v.LongPod && v.LongEvent }
	v := read("the hostile pods, device and events", drawn)

	hidden := regexp.MustCompile("[\u200b-\u200f\u202a-\u202e\u2066-\u2069\u061c\ufeff]")
	if loc := hidden.FindStringIndex(v.Body + v.Title); loc != nil {
		t.Errorf("the page shows a bidi or invisible control character raw: %q", (v.Body + v.Title)[max(0, loc[0]-20):min(len(v.Body+v.Title), loc[1]+20)])
	}
	if !strings.Contains(v.Pod, bidiShown) {
		t.Errorf("the bidi pod's card reads %q, want its name escaped as %s", v.Pod, bidiShown)
	}
	if !strings.Contains(v.Device, idShown) {
		t.Errorf("the bidi device's tile reads %q, want its ID escaped as %s", v.Device, idShown)
	}
	if !slices.ContainsFunc(v.Subjects, func(s string) bool { return strings.Contains(s, bidiShown) }) {
		t.Errorf("no event subject shows the bidi pod escaped as %s: %q", bidiShown, v.Subjects)
	}
	if pv, err := b.view(); err != nil {
		t.Fatal(err)
	} else if h := pv.pod("e2e/holder"); !strings.Contains(h.Text, idShown) {
		t.Errorf("the holder pod's card reads %q, want its device %s", h.Text, idShown)
	}

	for _, vp := range []struct {
		name string
		emu  chromedp.Action[chromedp.Void]
	}{
		{"desktop", chromedp.EmulateViewport(1280, 900)},
		{"phone", chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile, chromedp.EmulateTouch)},
	} {
		b.do(vp.emu)
		v := read("the hostile pods on the "+vp.name, drawn)
		if len(v.Overflow) > 0 || v.Scroll > v.Width {
			t.Errorf("on the %s the 10 KB name overflows: page %d px wide in a %d px viewport; elements past their column: %q",
				vp.name, v.Scroll, v.Width, v.Overflow)
		}
	}
}

// layoutView is what TestStatusPageLayout reads: the page's height and, per resource card,
// its height and its device drawing's.
type layoutView struct {
	Scroll int                  `json:"scroll"` // the page's scroll height
	Width  int                  `json:"width"`  // its scroll width
	Cards  map[string]cardSizes `json:"cards"`
}

type cardSizes struct {
	Devices int     `json:"devices"` // tiles drawn
	Card    float64 `json:"card"`    // the card's height, px
	Drawing float64 `json:"drawing"` // its devices' drawing's height, px
}

const layoutViewJS = `(() => {
  const cards = {};
  for (const r of document.querySelectorAll(".resource")) {
    const d = r.querySelector(".devices");
    cards[r.dataset.resource] = {devices: r.querySelectorAll(".dev").length, card: r.getBoundingClientRect().height,
      drawing: d ? d.getBoundingClientRect().height : 0};
  }
  return {scroll: document.documentElement.scrollHeight, width: document.documentElement.scrollWidth, cards};
})()`

// phonePageLimit bounds the phone page of a node with a 200-device and a 64-device resource,
// one pod and a few events (it was 6,143 px when up to 64 devices got large tiles). Each
// resource card is its heading, numbers, socket line and legend (about 200 px on a phone)
// and a device drawing of at most 240 + 20·log2(n) px while the devices fit it (360 px for
// 64, 393 px for 200, the smallest squares being 14 px: see app.js); the pods and the events
// take a few hundred more. 2,000 px is under two and a half screens of an 844 px phone.
const phonePageLimit = 2000

// TestStatusPageLayout: the drawing of a resource's devices grows with their number and stays
// compact on a phone. A node with 200 and 64 devices and a waiting pod makes a phone page
// under phonePageLimit in which the 64-device card is shorter than the 200-device card; with
// more resources of 1 to 1,000 devices, on a phone and on a desktop, a resource's card is
// never taller than that of a resource with more devices. The waiting pod's event counts down
// in words, as its card does, instead of showing its deadline in RFC 3339.
func TestStatusPageLayout(t *testing.T) {
	if testing.Short() {
		t.Skip("drives headless Chromium; run by make test")
	}
	b := newBrowser(t, 1280, 900, 150*time.Second)
	phone := chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile, chromedp.EmulateTouch)
	b.do(phone)
	n := newNode(t)
	// Written before kdm starts: under the kdm policy its admission waits for a plugin that
	// never comes.
	n.writeResourcePod("early", "example.com/later", 1)
	n.startKdm("--policy", devicemanager.KDMPolicyName)
	n.eventually("kdm serving", func(statusapi.NodeStatus) bool { return true })
	name := func(count int) string { return fmt.Sprintf("example.com/dev%04d", count) }
	plugin := func(count int) {
		var devs []*pluginapi.Device
		for i := range count {
			devs = append(devs, &pluginapi.Device{ID: fmt.Sprintf("DEV-%04d-%04d", count, i), Health: pluginapi.Healthy})
		}
		p, err := deviceplugin.New(deviceplugin.Config{ResourceName: name(count), PluginDir: n.pluginDir, Devices: devs,
			Logger: ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(1)))})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := p.Start(ctx); err != nil {
			t.Fatalf("starting the plugin of %s: %v", name(count), err)
		}
		t.Cleanup(p.Stop)
		n.eventually(name(count)+"'s devices", func(st statusapi.NodeStatus) bool { return st.Allocatable[name(count)] == int64(count) })
	}
	read := func(what string, counts []int) layoutView {
		t.Helper()
		start := time.Now()
		var last layoutView
		for time.Since(start) < 15*time.Second {
			rctx, rcancel := context.WithTimeout(b.ctx, 5*time.Second)
			v, err := chromedp.Run(rctx, chromedp.Evaluate[layoutView](layoutViewJS))
			rcancel()
			if err == nil {
				drawn := len(v.Cards) == len(counts)
				for _, c := range counts {
					drawn = drawn && v.Cards[name(c)].Devices == c
				}
				// Two equal reads in a row: the page has drawn and laid out this state.
				if drawn && reflect.DeepEqual(v, last) {
					return v
				}
				last = v
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("the page did not draw %s within 15s; last view: %+v", what, last)
		return last
	}

	plugin(200)
	plugin(64)
	b.do(chromedp.Navigate("http://" + n.healthAddr + "/"))
	v := read("the 200 and 64 devices", []int{64, 200})
	pv, _ := b.waitView("the waiting pod's event", 10*time.Second, func(v pageView) bool {
		_, ok := v.event(statusapi.EventWaiting, "e2e/early")
		return ok
	})
	e, _ := pv.event(statusapi.EventWaiting, "e2e/early")
	if !regexp.MustCompile(`waits for the device plugin of example\.com/later to register; gives up in \d+:\d\d \(at \d\d:\d\d:\d\d\)$`).MatchString(e.Text) ||
		regexp.MustCompile(`\d{4}-\d\d-\d\dT`).MatchString(e.Text) {
		t.Errorf("the waiting pod's event reads %q, want a countdown and a local time, no RFC 3339 deadline", e.Text)
	}
	b.screenshot(n.base, "status-page-phone-264-devices.png")
	small, large := v.Cards[name(64)], v.Cards[name(200)]
	t.Logf("phone: page %d px; 64 devices: card %.0f px, drawing %.0f px; 200 devices: card %.0f px, drawing %.0f px",
		v.Scroll, small.Card, small.Drawing, large.Card, large.Drawing)
	if v.Scroll > phonePageLimit {
		t.Errorf("on a phone the page of a node with 200 and 64 devices is %d px tall, want at most %d", v.Scroll, phonePageLimit)
	}
	if small.Card >= large.Card || small.Drawing >= large.Drawing {
		t.Errorf("on a phone the 64-device card (%.0f px, drawing %.0f px) is not shorter than the 200-device card (%.0f px, drawing %.0f px)",
			small.Card, small.Drawing, large.Card, large.Drawing)
	}
	if v.Width > 390 {
		t.Errorf("on a phone the page is %d px wide: it scrolls sideways", v.Width)
	}

	// Every count around the switches between labelled tiles and squares of each size.
	counts := []int{1, 2, 8, 9, 16, 24, 33, 40, 48, 100, 500, 1000}
	for _, c := range counts {
		plugin(c)
	}
	counts = append(counts, 64, 200)
	slices.Sort(counts)
	for _, vp := range []struct {
		name string
		emu  chromedp.Action[chromedp.Void]
	}{{"phone", phone}, {"desktop", chromedp.EmulateViewport(1280, 900)}} {
		b.do(vp.emu)
		v := read("every resource on the "+vp.name, counts)
		// The cards differ only in their devices: names, sockets and numbers are as long
		// (numbers with more digits only for more devices).
		var line []string
		for i, c := range counts {
			got := v.Cards[name(c)]
			line = append(line, fmt.Sprintf("%d: %.0f (%.0f)", c, got.Card, got.Drawing))
			if i == 0 {
				continue
			}
			if prev := v.Cards[name(counts[i-1])]; got.Card < prev.Card {
				t.Errorf("on the %s the card of %d devices is %.0f px tall, shorter than that of %d devices (%.0f px)",
					vp.name, c, got.Card, counts[i-1], prev.Card)
			}
		}
		t.Logf("%s: card heights (and their device drawings') by device count, px: %s", vp.name, strings.Join(line, ", "))
	}
}

// startSDKPlugin starts, in the test process, a plugin built on the deviceplugin SDK that
// serves devs for resource to n's kdm, and stops it at cleanup.
func startSDKPlugin(t *testing.T, n *node, resource string, devs []*pluginapi.Device) {
	t.Helper()
	plugin, err := deviceplugin.New(deviceplugin.Config{ResourceName: resource, PluginDir: n.pluginDir, Devices: devs,
		Logger: ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(1)))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := plugin.Start(ctx); err != nil {
		t.Fatalf("starting the plugin: %v", err)
	}
	t.Cleanup(plugin.Stop)
}
